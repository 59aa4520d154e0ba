"""One view over the three ways to deploy the handler.

A Cloud Run function (v2), a Cloud Run v2 service and a Cloud Run v1 service
spell timeout, runtime account, environment and URL differently; the rules
only want the meaning, so each shape is translated here, with the platform
default filled in where the resource leaves a field unset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pulumi_policy.proxy import UnknownValueError

from dedup_policies import types
from dedup_policies.props import (
    as_list,
    as_mapping,
    as_number,
    as_text,
    get_path,
    is_true,
    parse_duration,
)

# Request timeout when the resource does not set one.
DEFAULT_TIMEOUT_SECONDS = {
    types.FUNCTION_V2: 60.0,
    types.RUN_SERVICE_V2: 300.0,
    types.RUN_SERVICE_V1: 300.0,
}
INVOKER_IAM_DISABLED_ANNOTATION = "run.googleapis.com/invoker-iam-disabled"


@dataclass
class Environment:
    """A service's plain environment variables; `unknown` holds those not known yet
    (preview), each with the error that reading it raised."""

    values: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, UnknownValueError] = field(default_factory=dict)

    def names(self) -> set[str]:
        return set(self.values) | set(self.unknown)


def _container_envs(containers: Any, env: Environment) -> None:
    for container in as_list(containers):
        for item in as_list(get_path(container, "envs")):
            name = get_path(item, "name")
            if not isinstance(name, str):
                continue
            try:
                value = get_path(item, "value")
            except UnknownValueError as unknown:
                env.unknown[name] = unknown
                continue
            if isinstance(value, str):
                env.values[name] = value


def environment(resource_type: str, props: Mapping[str, Any]) -> Environment:
    """Plain environment variables (secret-backed ones carry no value and are skipped)."""
    env = Environment()
    if resource_type == types.FUNCTION_V2:
        variables = as_mapping(get_path(props, "serviceConfig", "environmentVariables")) or {}
        for name in variables:
            try:
                value = variables[name]
            except UnknownValueError as unknown:
                env.unknown[name] = unknown
                continue
            if isinstance(value, str):
                env.values[name] = value
    elif resource_type == types.RUN_SERVICE_V2:
        _container_envs(get_path(props, "template", "containers"), env)
    elif resource_type == types.RUN_SERVICE_V1:
        _container_envs(get_path(props, "template", "spec", "containers"), env)
    return env


def timeout_seconds(resource_type: str, props: Mapping[str, Any]) -> float | None:
    """Request timeout in seconds, platform default if unset, None if malformed."""
    if resource_type == types.FUNCTION_V2:
        raw = get_path(props, "serviceConfig", "timeoutSeconds")
        return DEFAULT_TIMEOUT_SECONDS[resource_type] if raw is None else as_number(raw)
    if resource_type == types.RUN_SERVICE_V2:
        raw = get_path(props, "template", "timeout")
        return DEFAULT_TIMEOUT_SECONDS[resource_type] if raw is None else parse_duration(raw)
    if resource_type == types.RUN_SERVICE_V1:
        raw = get_path(props, "template", "spec", "timeoutSeconds")
        return DEFAULT_TIMEOUT_SECONDS[resource_type] if raw is None else as_number(raw)
    return None


def service_account(resource_type: str, props: Mapping[str, Any]) -> str | None:
    """The runtime service account email, or None when the platform default applies."""
    if resource_type == types.FUNCTION_V2:
        return as_text(get_path(props, "serviceConfig", "serviceAccountEmail"))
    if resource_type == types.RUN_SERVICE_V2:
        return as_text(get_path(props, "template", "serviceAccount"))
    if resource_type == types.RUN_SERVICE_V1:
        return as_text(get_path(props, "template", "spec", "serviceAccountName"))
    return None


def invoker_iam_disabled(resource_type: str, props: Mapping[str, Any]) -> bool:
    """True when the service skips the run.invoker check (i.e. it is public)."""
    if resource_type == types.RUN_SERVICE_V2:
        if is_true(get_path(props, "invokerIamDisabled")):
            return True
        annotations = as_mapping(get_path(props, "annotations")) or {}
        return is_true(annotations.get(INVOKER_IAM_DISABLED_ANNOTATION))
    if resource_type == types.RUN_SERVICE_V1:
        for path in (("metadata", "annotations"), ("template", "metadata", "annotations")):
            annotations = as_mapping(get_path(props, *path)) or {}
            if is_true(annotations.get(INVOKER_IAM_DISABLED_ANNOTATION)):
                return True
    return False


def urls(resource_type: str, props: Mapping[str, Any]) -> tuple[list[str], bool]:
    """The handler's known URLs and audiences, and whether any of them is still unknown.

    Unknown URLs are normal during preview of a new service; callers fall back
    to the dependency graph instead of giving up.
    """
    if resource_type == types.FUNCTION_V2:
        paths: list[tuple[str | int, ...]] = [("url",), ("serviceConfig", "uri")]
    elif resource_type == types.RUN_SERVICE_V2:
        paths = [("uri",), ("urls",), ("customAudiences",)]
    elif resource_type == types.RUN_SERVICE_V1:
        paths = [("statuses", 0, "url")]
    else:
        return [], False
    found: list[str] = []
    unknown = False
    for path in paths:
        try:
            value = get_path(props, *path)
            for item in as_list(value) if not isinstance(value, str) else [value]:
                if as_text(item):
                    found.append(item)
        except UnknownValueError:
            unknown = True
    return found, unknown
