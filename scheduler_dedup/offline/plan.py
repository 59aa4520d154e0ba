"""Print what `pulumi up` would create for a stack, offline.

    python -m scheduler_dedup.offline.plan --dir DIR [--stack STACK]

Runs the project's real program under Pulumi's mocks (see `scheduler_dedup.offline.mockrun`), so
the plan reflects the code as it is, with no Pulumi CLI, plugins or credentials.
Prints the resource tree (type, name, key settings), the stack outputs and a
one-line summary. Without --stack it plans the project's only stack file.
Secret values print as `[secret]` (also inside nested blocks), values unknown
until the update as `[unknown]`, as `pulumi preview` shows them. A program
with its own virtualenv runs in it (Pulumi.yaml runtime.options.virtualenv or
`--virtualenv DIR`). A config error or a failing program prints `error: ...`
(with the program's file and line when it raised) and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pulumi

from scheduler_dedup.offline.captured import STACK_TYPE, CapturedResource, Secret, Unknown
from scheduler_dedup.offline.event_loops import close_leftover_loops
from scheduler_dedup.offline.failures import ProgramFailed
from scheduler_dedup.offline.mockrun import run_program
from scheduler_dedup.offline.stack_file import StackFileError, choose_stack

SCHEDULER_JOB_TYPE = "gcp:cloudscheduler/job:Job"

# The settings worth reading in a plan, per type token (dotted paths into the inputs).
# Types not listed show their top-level scalar inputs.
KEY_SETTINGS: dict[str, tuple[str, ...]] = {
    "gcp:projects/service:Service": ("service", "disableOnDestroy"),
    "gcp:serviceaccount/account:Account": ("accountId", "displayName"),
    "gcp:firestore/database:Database": (
        "name",
        "locationId",
        "type",
        "deleteProtectionState",
        "pointInTimeRecoveryEnablement",
        "deletionPolicy",
    ),
    "gcp:firestore/field:Field": ("database", "collection", "field", "ttlConfig", "indexConfig"),
    "gcp:projects/iAMCustomRole:IAMCustomRole": ("roleId", "permissions"),
    "gcp:projects/iAMMember:IAMMember": ("role", "member", "condition.expression"),
    "gcp:serviceaccount/iAMMember:IAMMember": ("serviceAccountId", "role", "member"),
    "gcp:storage/bucketIAMMember:BucketIAMMember": ("bucket", "role", "member"),
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember": (
        "repository",
        "role",
        "member",
    ),
    "gcp:cloudrunv2/serviceIamMember:ServiceIamMember": ("name", "role", "member"),
    # A proxy target's Cloud Run job may live in another project: show where the grant is.
    "gcp:cloudrunv2/jobIamMember:JobIamMember": ("project", "location", "name", "role", "member"),
    "gcp:storage/bucket:Bucket": ("name", "location", "publicAccessPrevention"),
    "gcp:storage/bucketObject:BucketObject": ("bucket", "name", "source"),
    "gcp:artifactregistry/repository:Repository": ("repositoryId", "format", "location"),
    "gcp:cloudfunctionsv2/function:Function": (
        "name",
        "location",
        "buildConfig.runtime",
        "buildConfig.entryPoint",
        "buildConfig.serviceAccount",
        "buildConfig.source.storageSource.object",
        "serviceConfig.serviceAccountEmail",
        "serviceConfig.timeoutSeconds",
        "serviceConfig.maxInstanceCount",
        "serviceConfig.maxInstanceRequestConcurrency",
        "serviceConfig.ingressSettings",
        "serviceConfig.environmentVariables",
    ),
    # 1st gen functions and Cloud Run v1 services, as foreign programs declare them.
    "gcp:cloudfunctions/function:Function": (
        "name",
        "region",
        "runtime",
        "entryPoint",
        "triggerHttp",
        "serviceAccountEmail",
        "ingressSettings",
        "environmentVariables",
    ),
    "gcp:cloudrunv2/service:Service": (
        "name",
        "location",
        "ingress",
        "invokerIamDisabled",
        "template.serviceAccount",
        "template.containers",
    ),
    "gcp:cloudrun/service:Service": (
        "name",
        "location",
        "metadata.annotations",
        "template.metadata.annotations",
        "template.spec.serviceAccountName",
        "template.spec.containers",
    ),
    "gcp:cloudscheduler/job:Job": (
        "name",
        "schedule",
        "timeZone",
        "paused",
        "attemptDeadline",
        "retryConfig",
        "httpTarget.httpMethod",
        "httpTarget.uri",
        "httpTarget.headers",
        "httpTarget.oidcToken",
    ),
}

_MISSING = object()


def _lookup(values: Any, path: str) -> Any:
    """The value at a dotted path; inside a secret or unknown block, that block."""
    for part in path.split("."):
        if isinstance(values, Secret | Unknown):
            return values
        if not isinstance(values, dict) or part not in values:
            return _MISSING
        values = values[part]
    return values


def format_value(value: Any) -> str:
    """One-line rendering: YAML-style booleans, whole floats as ints (wire form), maps as k=v;
    secrets as [secret] and values unknown before the update as [unknown]."""
    if isinstance(value, Secret):
        return "[secret]"
    if isinstance(value, Unknown):
        return "[unknown]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, pulumi.AssetArchive):
        return _archive_contents(value.assets)
    if isinstance(value, pulumi.Asset | pulumi.Archive):
        return f"<{type(value).__name__}>"
    return str(value)


def _archive_contents(assets: dict[str, Any]) -> str:
    """An archive's top level: its files, and each folder with how many files it holds."""
    top: dict[str, int] = {}
    for name in assets:
        head, slash, _ = name.partition("/")
        top[head + slash] = top.get(head + slash, 0) + 1
    entries = (
        f"{name} ({count} files)" if name.endswith("/") else name
        for name, count in sorted(top.items())
    )
    return f"<archive of {len(assets)} files: {', '.join(entries)}>"


def key_settings(resource: CapturedResource) -> list[tuple[str, str]]:
    """(path, rendered value) pairs worth showing for this resource."""
    paths = KEY_SETTINGS.get(resource.type)
    if paths is None:
        paths = tuple(
            key
            for key, value in resource.inputs.items()
            if not isinstance(value, dict | list) and key != "project"
        )
    found = ((path, _lookup(resource.inputs, path)) for path in paths)
    return [(path, format_value(value)) for path, value in found if value is not _MISSING]


def render_plan(resources: Sequence[CapturedResource], stack_outputs: dict[str, Any]) -> str:
    """The plan as text: a parent/child tree of resources, then the stack outputs."""
    children: dict[str | None, list[CapturedResource]] = {}
    # Sorted, because independent resources register in no fixed order.
    for resource in sorted(resources, key=lambda r: (r.type, r.name)):
        children.setdefault(resource.parent, []).append(resource)
    lines: list[str] = []
    custom = sum(1 for resource in resources if resource.custom)
    components = sum(1 for r in resources if not r.custom and r.type != STACK_TYPE)
    # `make policy-check` counts every resource the engine sees, the component
    # and the stack included; say both numbers so the two commands agree.
    lines.append(
        f"{len(resources)} resources: {custom} provider resources to create, "
        f"{components} component(s) and the stack:"
    )

    def walk(parent: str | None, depth: int) -> None:
        for resource in children.get(parent, []):
            indent = "    " * depth
            if resource.type != STACK_TYPE:
                lines.append(f"{indent}+ {resource.type}  {resource.name}")
                for path, value in key_settings(resource):
                    lines.append(f"{indent}      {path}: {value}")
            walk(resource.urn, depth + (resource.type != STACK_TYPE))

    walk(None, 0)
    lines.append("")
    lines.append("Outputs:")
    for name, value in stack_outputs.items():
        if isinstance(value, dict):
            lines.append(f"    {name}:")
            lines.extend(f"        {key}: {format_value(item)}" for key, item in value.items())
        else:
            lines.append(f"    {name}: {format_value(value)}")
    return "\n".join(lines)


def summary_line(resources: Sequence[CapturedResource], stack: str) -> str:
    """The plan in one line: provider resources by type, the Scheduler jobs, what to run next."""
    by_type: dict[str, int] = {}
    for resource in resources:
        if resource.custom:
            short = resource.type.rsplit(":", 1)[-1]
            by_type[short] = by_type.get(short, 0) + 1
    types = ", ".join(f"{count} {name}" for name, count in sorted(by_type.items()))
    jobs = [str(r.inputs.get("name") or r.name) for r in resources if r.type == SCHEDULER_JOB_TYPE]
    return (
        f"summary: {sum(by_type.values())} to create ({types}); "
        f"{len(jobs)} Scheduler job(s): {', '.join(sorted(jobs)) or 'none'}; "
        f"next: make policy-check STACK={stack}, then pulumi preview --stack {stack}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    finally:
        close_leftover_loops()


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=".", type=Path, help="directory holding Pulumi.yaml")
    parser.add_argument(
        "--stack", default=None, help="stack name (reads Pulumi.STACK.yaml; default: the only one)"
    )
    parser.add_argument(
        "--virtualenv",
        type=Path,
        default=None,
        help="the program's virtualenv (default: Pulumi.yaml runtime.options.virtualenv)",
    )
    args = parser.parse_args(argv)
    try:
        args.stack = choose_stack(args.dir, args.stack)
        resources = run_program(args.dir, args.stack, args.virtualenv)
    except StackFileError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ProgramFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for note in resources.notes:
        print(f"note: {note}", file=sys.stderr)
    for warning in resources.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    try:
        print(f"Plan for stack {args.stack!r} of {args.dir.resolve()} (offline, Pulumi mocks)")
        print(render_plan(resources, resources.stack_outputs))
        print()
        print(summary_line(resources, args.stack))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (`make plan | head`): not an error. Point
        # stdout at devnull so the interpreter's final flush stays quiet too
        # (the recipe of the Python docs' "Note on SIGPIPE").
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
