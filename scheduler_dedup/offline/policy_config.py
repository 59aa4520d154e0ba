"""Policy config as the Pulumi CLI builds it: parsed, layered, validated.

Before the engine configures an analyzer, the CLI reconciles each policy's
enforcement level and properties from three layers: the defaults in the policy's
config schema, the pack's initial config, and the user's `--policy-pack-config`
file (where "all" sets every level first), and rejects properties the schema does
not allow. This module reproduces those rules, reading the pack's declarations
from its GetAnalyzerInfo response, so config errors and levels match the CLI's.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from pulumi.runtime import proto
from pulumi_policy import EnforcementLevel

from scheduler_dedup.offline.errors import CheckError

# Enforcement levels as config spells them, and as the analyzer protocol does (both ways).
_LEVELS = {level.value: level for level in EnforcementLevel}
PROTO_LEVEL = {
    EnforcementLevel.ADVISORY: proto.ADVISORY,
    EnforcementLevel.MANDATORY: proto.MANDATORY,
    EnforcementLevel.REMEDIATE: proto.REMEDIATE,
    EnforcementLevel.DISABLED: proto.DISABLED,
}
LEVEL_FROM_PROTO = {value: key for key, value in PROTO_LEVEL.items()}


def parse_policy_config(text: str) -> dict[str, tuple[EnforcementLevel | None, dict[str, Any]]]:
    """`--policy-pack-config` JSON: {"policy": "mandatory"} or {"policy": {"enforcementLevel":
    ..., "prop": ...}}; the key "all" sets every policy's level."""
    if not text.strip():
        return {}
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise CheckError(f"policy config is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise CheckError("policy config must be a JSON object keyed by policy name")
    result: dict[str, tuple[EnforcementLevel | None, dict[str, Any]]] = {}
    for name, value in document.items():
        if isinstance(value, str):
            result[name] = (_level(name, value), {})
        elif isinstance(value, dict):
            properties = dict(value)
            raw = properties.pop("enforcementLevel", None)
            if raw is not None and not isinstance(raw, str):
                raise CheckError(f"policy config {name!r}: enforcementLevel must be a string")
            result[name] = (_level(name, raw) if raw is not None else None, properties)
        else:
            raise CheckError(f"policy config {name!r}: must be a string or an object")
    return {k: v for k, v in result.items() if v[0] is not None or v[1]}


def _level(name: str, value: str) -> EnforcementLevel:
    if value not in _LEVELS:
        choices = ", ".join(_LEVELS)
        raise CheckError(f"policy config {name!r}: {value!r} is not one of {choices}")
    return _LEVELS[value]


@dataclass
class PolicyMeta:
    name: str
    level: EnforcementLevel
    schema: dict[str, Any] | None
    required: list[str]


def policy_metadata(info: Any) -> list[PolicyMeta]:
    metas = []
    for policy in info.policies:
        has_schema = policy.HasField("configSchema")
        metas.append(
            PolicyMeta(
                name=policy.name,
                level=LEVEL_FROM_PROTO[policy.enforcementLevel],
                schema=json_format.MessageToDict(policy.configSchema.properties)
                if has_schema
                else None,
                required=list(policy.configSchema.required) if has_schema else [],
            )
        )
    return metas


def initial_config(info: Any) -> dict[str, tuple[EnforcementLevel | None, dict[str, Any]]]:
    return {
        name: (
            LEVEL_FROM_PROTO[value.enforcementLevel],
            json_format.MessageToDict(value.properties),
        )
        for name, value in info.initialConfig.items()
    }


def reconcile_config(
    metas: list[PolicyMeta],
    *layers: Mapping[str, tuple[EnforcementLevel | None, dict[str, Any]]],
) -> dict[str, tuple[EnforcementLevel, dict[str, Any]]]:
    """Schema defaults, then the pack's initial config, then the user's config; validated.

    Same order and merge rules as the CLI: "all" sets every level first, then
    per-policy levels and properties are laid over it.
    """
    for layer in layers:
        _check_names(metas, layer)
    result: dict[str, tuple[EnforcementLevel, dict[str, Any]]] = {}
    for meta in metas:
        defaults = {
            key: prop["default"]
            for key, prop in (meta.schema or {}).items()
            if isinstance(prop, dict) and "default" in prop
        }
        result[meta.name] = (meta.level, defaults)
    for layer in layers:
        all_level = layer.get("all", (None, {}))[0]
        if all_level is not None:
            result = {name: (all_level, props) for name, (_, props) in result.items()}
        for name, (level, props) in layer.items():
            current_level, current_props = result.get(name, (EnforcementLevel.ADVISORY, {}))
            result[name] = (level or current_level, {**current_props, **props})
    errors = []
    for meta in metas:
        if meta.schema is None:
            continue
        props = result[meta.name][1]
        errors.extend(
            f"{meta.name}: {e}" for e in _schema_errors(meta.schema, meta.required, props)
        )
    if errors:
        raise CheckError("invalid policy config: " + "; ".join(errors))
    return result


def _suggestion(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_names(
    metas: list[PolicyMeta], layer: Mapping[str, tuple[EnforcementLevel | None, dict[str, Any]]]
) -> None:
    """A policy or property the pack does not have is a typo: the setting would be ignored.

    The error names the closest valid name, so a misspelt `maxSecond` or
    `scheduler-attempt-deadlines` fails the run instead of silently doing nothing.
    """
    by_name = {meta.name: meta for meta in metas}
    for name, (_, props) in layer.items():
        if name == "all":
            continue
        meta = by_name.get(name)
        if meta is None:
            raise CheckError(
                f"policy config names {name!r}, which is not a policy of this pack"
                + _suggestion(name, sorted(by_name))
            )
        allowed = sorted(meta.schema or {})
        for prop in props:
            if prop not in allowed:
                where = f"its properties are {', '.join(allowed)}" if allowed else "it has none"
                raise CheckError(
                    f"policy config {name!r}: unknown property {prop!r}"
                    + (_suggestion(prop, allowed) or f" ({where})")
                )


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "number": (int, float),
    "integer": (int, float),
}


def _value_errors(schema: Mapping[str, Any], value: Any, where: str) -> list[str]:
    """The JSON-schema keywords policy configs use (type, enum, bounds, lengths, items)."""
    expected = schema.get("type")
    if isinstance(expected, str) and expected in _JSON_TYPES:
        ok = isinstance(value, _JSON_TYPES[expected]) and not (
            isinstance(value, bool) and expected in ("number", "integer")
        )
        if ok and expected == "integer":
            ok = float(value).is_integer()
        if not ok:
            return [f"{where}: invalid type, expected {expected}"]
    errors = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: must be one of {schema['enum']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: must be >= {schema['minimum']:g}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: must be <= {schema['maximum']:g}")
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        errors.append(f"{where}: must be at least {schema['minLength']:g} characters")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: must have at least {schema['minItems']:g} items")
        if isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                errors.extend(_value_errors(schema["items"], item, f"{where}.{index}"))
    return errors


def _schema_errors(
    properties: Mapping[str, Any], required: list[str], config: Mapping[str, Any]
) -> list[str]:
    errors = [f"{name} is required" for name in required if name not in config]
    for name, value in config.items():
        if isinstance(properties.get(name), dict):
            errors.extend(_value_errors(properties[name], value, name))
    return errors
