"""`make policy-check`: evaluate a CrossGuard policy pack against a Pulumi stack offline.

The Pulumi CLI cannot run here, so this plays the engine's part: it runs the
project's program under mocks (`offline.mockrun`), loads the pack by running
its own `__main__.py` with `PolicyPack` captured instead of served, and drives
the SDK's analyzer servicer through the same gRPC messages the engine sends
(GetAnalyzerInfo, Configure, ConfigureStack, Remediate, Analyze per resource,
AnalyzeStack). Enforcement levels, `--policy-pack-config`, schema defaults and
unknown values therefore behave as under `pulumi preview --policy-pack`.

Usage: python -m offline.policy_check --dir DIR --stack STACK
           [--policy-pack PACK_DIR] [--policy-pack-config FILE.json] [--preview]

`--preview` approximates the first `pulumi preview` of a new stack: every value
a provider computes, and every input built from one, is unknown.
Exit: 0 no mandatory violation, 1 mandatory violation(s), 2 usage/config error.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import math
import runpy
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi_policy
import yaml
from google.protobuf import json_format, struct_pb2
from pulumi.runtime import proto
from pulumi_policy import EnforcementLevel
from pulumi_policy.deserialize import serialize_properties
from pulumi_policy.policy import _PolicyAnalyzerServicer
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PACK_DIR = REPO_ROOT / "policies"
# What the SDK reports as the pack version; the CLI shows PulumiPolicy.yaml's instead.
SDK_PACK_VERSION = "0.0.1"
_LEVELS = {level.value: level for level in EnforcementLevel}
_PROTO_LEVEL = {
    EnforcementLevel.ADVISORY: proto.ADVISORY,
    EnforcementLevel.MANDATORY: proto.MANDATORY,
    EnforcementLevel.REMEDIATE: proto.REMEDIATE,
    EnforcementLevel.DISABLED: proto.DISABLED,
}
_LEVEL_FROM_PROTO = {value: key for key, value in _PROTO_LEVEL.items()}


class CheckError(Exception):
    """A usage or configuration problem, reported as one `error: ...` line (exit 2)."""


# --- the stack --------------------------------------------------------------------------


@dataclass
class StackResource:
    """One registered resource as the engine knows it: inputs for Analyze, outputs for
    AnalyzeStack."""

    type: str
    name: str
    urn: str
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]
    parent: str | None = None
    dependencies: list[str] = field(default_factory=list)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    provider: str | None = None
    protect: bool = False
    custom: bool = True


def _attr(record: Any, name: str, default: Any = None) -> Any:
    if isinstance(record, Mapping):
        return record.get(name, default)
    return getattr(record, name, default)


def stack_resource(record: Any) -> StackResource:
    """Adapts one `offline.mockrun` record (object or mapping) to `StackResource`."""
    inputs = _attr(record, "inputs") or {}
    outputs = _attr(record, "outputs")
    prop_deps = _attr(record, "property_dependencies") or _attr(record, "propertyDependencies")
    return StackResource(
        type=str(_attr(record, "type")),
        name=str(_attr(record, "name")),
        urn=str(_attr(record, "urn")),
        inputs=dict(inputs),
        # The engine's state for a resource is its inputs plus what the provider computed;
        # a mock that returns only computed fields still yields the full picture.
        outputs={**inputs, **dict(outputs or {})},
        parent=_attr(record, "parent") or None,
        dependencies=[str(d) for d in (_attr(record, "dependencies") or [])],
        property_dependencies={
            str(k): [str(u) for u in v] for k, v in dict(prop_deps or {}).items()
        },
        provider=_attr(record, "provider") or None,
        protect=bool(_attr(record, "protect", False)),
        custom=bool(_attr(record, "custom", True)),
    )


def run_stack(project_dir: Path, stack: str) -> list[StackResource]:
    """Runs the project's program for `stack` under mocks (the shared `offline.mockrun`)."""
    try:
        from offline import mockrun
    except ImportError as exc:
        raise CheckError(f"offline.mockrun is not available: {exc}") from None
    try:
        result = mockrun.run_program(project_dir, stack)
    except mockrun.ProgramFailed as exc:
        raise CheckError(f"stack {stack!r}: {exc}") from None
    records = _attr(result, "resources", result)
    return [stack_resource(record) for record in records]


# --- a first preview, approximated ------------------------------------------------------

# Shorter provider-computed strings ("ACTIVE", "") are too common to trace reliably.
_MIN_TRACED_LENGTH = 8


def _unknown_leaves(value: Any, computed: set[str], found: set[str]) -> Any:
    """`value` with every string leaf that contains a computed value made unknown."""
    if isinstance(value, Mapping):
        return {k: _unknown_leaves(v, computed, found) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_unknown_leaves(v, computed, found) for v in value]
    if isinstance(value, str) and any(c in value for c in computed):
        found.add(value)
        return UNKNOWN_STRING_VALUE
    return value


def _computed_leaves(inputs: Any, outputs: Any, found: set[str]) -> Any:
    """`outputs` with every leaf the inputs did not set (the provider computed it) unknown."""
    if isinstance(outputs, Mapping):
        given = inputs if isinstance(inputs, Mapping) else {}
        return {
            k: _computed_leaves(given.get(k), v, found) if k in given else _all_unknown(v, found)
            for k, v in outputs.items()
        }
    return outputs


def _all_unknown(value: Any, found: set[str]) -> Any:
    if isinstance(value, str) and len(value) >= _MIN_TRACED_LENGTH:
        found.add(value)
    return UNKNOWN_STRING_VALUE


def as_first_preview(resources: list[StackResource]) -> list[StackResource]:
    """The stack as the first `pulumi preview` of a new stack would show it, approximately.

    Nothing exists yet, so every value a provider computes (emails, URLs, role
    names) is unknown, and so is every input built from one: an input string is
    unknown when it contains an unknown value of a resource it depends on. Values
    given as inputs stay known, as the providers' previews report them.
    """
    unknown_by_urn: dict[str, set[str]] = {}
    result = []
    for resource in resources:
        traced: set[str] = set()
        for urns in resource.property_dependencies.values():
            for urn in urns:
                traced |= unknown_by_urn.get(urn, set())
        traced = {value for value in traced if len(value) >= _MIN_TRACED_LENGTH}
        derived: set[str] = set()
        inputs = _unknown_leaves(resource.inputs, traced, derived)
        found: set[str] = set(derived)
        outputs = resource.outputs
        if resource.custom:
            outputs = _computed_leaves(
                resource.inputs, _unknown_leaves(outputs, traced, found), found
            )
        unknown_by_urn[resource.urn] = found
        result.append(StackResource(**{**resource.__dict__, "inputs": inputs, "outputs": outputs}))
    return result


# --- the pack -------------------------------------------------------------------------


@dataclass
class LoadedPack:
    """The arguments a pack's `__main__.py` passed to `PolicyPack`."""

    directory: Path
    arguments: dict[str, Any]

    def servicer(self) -> _PolicyAnalyzerServicer:
        """A fresh analyzer servicer, built exactly as `PolicyPack.__init__` builds it."""
        a = self.arguments
        return _PolicyAnalyzerServicer(
            a["name"],
            SDK_PACK_VERSION,
            a["policies"],
            a.get("enforcement_level") or EnforcementLevel.ADVISORY,
            a.get("initial_config"),
            a.get("description"),
            a.get("display_name"),
            a.get("readme"),
            a.get("provider"),
            a.get("tags"),
            a.get("repository"),
        )


@contextlib.contextmanager
def _captured_policy_pack(captured: list[dict[str, Any]]) -> Iterator[None]:
    real = pulumi_policy.PolicyPack
    signature = inspect.signature(real.__init__)

    class _Capture:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            bound = signature.bind(self, *args, **kwargs)
            arguments = dict(bound.arguments)
            arguments.pop("self")
            captured.append(arguments)

    pulumi_policy.PolicyPack = _Capture  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        pulumi_policy.PolicyPack = real  # type: ignore[misc]


def _forget_foreign_modules(pack_dir: Path) -> None:
    """Drop cached modules that share a name with the pack's but come from elsewhere.

    Two copies of a pack (this repo's and a user's edited one) use the same
    package name; the one being loaded must be imported from its own directory.
    """
    local = {p.stem for p in pack_dir.glob("*.py")} | {
        p.parent.name for p in pack_dir.glob("*/__init__.py")
    }
    for name in list(sys.modules):
        top = name.split(".")[0]
        if top not in local or top == "__main__":
            continue
        origin = getattr(sys.modules[name], "__file__", None) or ""
        if not Path(origin).resolve().is_relative_to(pack_dir.resolve()):
            del sys.modules[name]


def load_pack(pack_dir: Path) -> LoadedPack:
    """Runs the pack's entry point with `PolicyPack` captured instead of served."""
    main = pack_dir / "__main__.py"
    if not (pack_dir / "PulumiPolicy.yaml").is_file() or not main.is_file():
        raise CheckError(f"{pack_dir} is not a Python policy pack (PulumiPolicy.yaml, __main__.py)")
    captured: list[dict[str, Any]] = []
    _forget_foreign_modules(pack_dir)
    sys.path.insert(0, str(pack_dir))
    try:
        with _captured_policy_pack(captured):
            runpy.run_path(str(main), run_name="__main__")
    finally:
        sys.path.remove(str(pack_dir))
    if len(captured) != 1:
        raise CheckError(f"{main} must construct exactly one PolicyPack, it built {len(captured)}")
    arguments = captured[0]
    if not arguments.get("policies"):
        raise CheckError(f"{main}: the PolicyPack has no policies")
    return LoadedPack(pack_dir, arguments)


# --- policy config, as the CLI reconciles it -------------------------------------------


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
class _PolicyMeta:
    name: str
    level: EnforcementLevel
    schema: dict[str, Any] | None
    required: list[str]


def _policy_metadata(info: Any) -> list[_PolicyMeta]:
    metas = []
    for policy in info.policies:
        has_schema = policy.HasField("configSchema")
        metas.append(
            _PolicyMeta(
                name=policy.name,
                level=_LEVEL_FROM_PROTO[policy.enforcementLevel],
                schema=json_format.MessageToDict(policy.configSchema.properties)
                if has_schema
                else None,
                required=list(policy.configSchema.required) if has_schema else [],
            )
        )
    return metas


def _initial_config(info: Any) -> dict[str, tuple[EnforcementLevel | None, dict[str, Any]]]:
    return {
        name: (
            _LEVEL_FROM_PROTO[value.enforcementLevel],
            json_format.MessageToDict(value.properties),
        )
        for name, value in info.initialConfig.items()
    }


def reconcile_config(
    metas: list[_PolicyMeta],
    *layers: Mapping[str, tuple[EnforcementLevel | None, dict[str, Any]]],
) -> dict[str, tuple[EnforcementLevel, dict[str, Any]]]:
    """Schema defaults, then the pack's initial config, then the user's config; validated.

    Same order and merge rules as the CLI: "all" sets every level first, then
    per-policy levels and properties are laid over it.
    """
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


# --- driving the servicer ---------------------------------------------------------------


@dataclass(frozen=True)
class Diagnostic:
    policy: str
    level: EnforcementLevel
    urn: str
    message: str


def _wire(value: Any) -> Any:
    """A property value as the engine puts it in a protobuf Struct."""
    if type(value).__name__ == "Unknown" or value is ...:
        return UNKNOWN_STRING_VALUE
    if isinstance(value, Mapping):
        return {str(k): _wire(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_wire(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else str(value)
    try:
        return _wire(serialize_properties({"v": value})["v"])  # assets and archives
    except TypeError:
        return str(value)


def _struct(props: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(_wire(props))
    return struct


def _options(resource: StackResource) -> Any:
    return proto.AnalyzerResourceOptions(protect=resource.protect, parent=resource.parent or "")


def _provider(resource: StackResource, by_urn: Mapping[str, StackResource]) -> Any:
    if not resource.provider:
        return None
    # A provider reference is "URN::ID"; accept a bare URN too.
    provider = by_urn.get(resource.provider) or by_urn.get(resource.provider.rsplit("::", 1)[0])
    if provider is None:
        return None
    return proto.AnalyzerProviderResource(
        type=provider.type,
        properties=_struct(provider.inputs),
        urn=provider.urn,
        name=provider.name,
    )


def _collect(response: Any, default_urn: str, out: list[Diagnostic]) -> None:
    for diagnostic in response.diagnostics:
        out.append(
            Diagnostic(
                policy=diagnostic.policyName,
                level=_LEVEL_FROM_PROTO[diagnostic.enforcementLevel],
                urn=diagnostic.urn or default_urn,
                message=diagnostic.message,
            )
        )


def evaluate(
    pack: LoadedPack,
    resources: Iterable[StackResource],
    policy_config: Mapping[str, tuple[EnforcementLevel | None, dict[str, Any]]] | None = None,
    *,
    stack: str = "stack",
    project: str = "project",
    dry_run: bool = True,
) -> list[Diagnostic]:
    """Every diagnostic the engine would show for this stack, in the engine's call order."""
    resources = list(resources)
    servicer = pack.servicer()
    info = servicer.GetAnalyzerInfo(None, None)
    config = reconcile_config(_policy_metadata(info), _initial_config(info), policy_config or {})
    request = proto.ConfigureAnalyzerRequest()
    for name, (level, props) in config.items():
        entry = request.policyConfig[name]
        entry.enforcementLevel = _PROTO_LEVEL[level]
        entry.properties.update(_wire(props))
    servicer.Configure(request, None)
    servicer.ConfigureStack(
        proto.AnalyzerStackConfigureRequest(stack=stack, project=project, dry_run=dry_run), None
    )
    by_urn = {resource.urn: resource for resource in resources}
    diagnostics: list[Diagnostic] = []
    stack_request = proto.AnalyzeStackRequest()
    for resource in resources:
        properties = _struct(resource.inputs)
        provider = _provider(resource, by_urn)
        common = {"type": resource.type, "urn": resource.urn, "name": resource.name}
        if provider is not None:
            common["provider"] = provider
        remediated = servicer.Remediate(
            proto.AnalyzeRequest(**common, properties=properties, options=_options(resource)),
            None,
        )
        for remediation in remediated.remediations:
            if remediation.HasField("properties"):
                properties = remediation.properties
        response = servicer.Analyze(
            proto.AnalyzeRequest(**common, properties=properties, options=_options(resource)),
            None,
        )
        _collect(response, resource.urn, diagnostics)
        entry = stack_request.resources.add(
            **common,
            properties=_struct(resource.outputs),
            options=_options(resource),
            parent=resource.parent or "",
            dependencies=resource.dependencies,
        )
        for key, urns in resource.property_dependencies.items():
            entry.propertyDependencies[key].urns.extend(urns)
    _collect(servicer.AnalyzeStack(stack_request, None), "", diagnostics)
    return diagnostics


# --- command line -----------------------------------------------------------------------


def _project_name(project_dir: Path) -> str:
    try:
        document = yaml.safe_load((project_dir / "Pulumi.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CheckError(f"{project_dir / 'Pulumi.yaml'}: {exc}") from None
    name = document.get("name") if isinstance(document, dict) else None
    return name if isinstance(name, str) else project_dir.name


def report(diagnostics: list[Diagnostic], out: io.TextIOBase | Any) -> None:
    """One block per violation (level, rule, resource, message), then a summary line."""
    for d in diagnostics:
        resource = d.urn or "(stack)"
        print(f"[{d.level.value}] {d.policy}: {resource}", file=out)
        for line in d.message.splitlines():
            print(f"    {line}", file=out)
    mandatory = sum(1 for d in diagnostics if d.level == EnforcementLevel.MANDATORY)
    advisory = len(diagnostics) - mandatory
    verdict = "FAILED" if mandatory else "passed"
    print(
        f"policy check {verdict}: {mandatory} mandatory, {advisory} advisory violation(s)",
        file=out,
    )


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m offline.policy_check",
        description="Evaluate a CrossGuard policy pack against a Pulumi stack, offline.",
    )

    def usage_error(message: str) -> None:
        raise CheckError(f"{message} (see --help)")

    parser.error = usage_error  # type: ignore[method-assign]
    parser.add_argument("--dir", default=".", help="Pulumi project directory (has Pulumi.yaml)")
    parser.add_argument("--stack", default="example", help="stack name (Pulumi.<stack>.yaml)")
    parser.add_argument(
        "--policy-pack",
        default=None,
        help="policy pack directory (default: DIR/policies if present, else this repo's)",
    )
    parser.add_argument(
        "--policy-pack-config", default=None, help="JSON policy config, as for `pulumi preview`"
    )
    parser.add_argument(
        "--preview",
        action="store_true",
        help="approximate the first preview of a new stack: provider-computed values unknown",
    )
    return parser.parse_args(argv)


def run(argv: list[str] | None = None, out: Any = None) -> int:
    """The command; returns the exit status instead of exiting."""
    out = out or sys.stdout
    args = _arguments(argv)
    project_dir = Path(args.dir).resolve()
    if not (project_dir / "Pulumi.yaml").is_file():
        raise CheckError(f"{project_dir} has no Pulumi.yaml (pass --dir PROJECT_DIR)")
    if args.policy_pack:
        pack_dir = Path(args.policy_pack).resolve()
    elif (project_dir / "policies" / "PulumiPolicy.yaml").is_file():
        pack_dir = project_dir / "policies"
    else:
        pack_dir = DEFAULT_PACK_DIR
    config = {}
    if args.policy_pack_config:
        try:
            config = parse_policy_config(Path(args.policy_pack_config).read_text())
        except OSError as exc:
            raise CheckError(f"cannot read policy config: {exc}") from None
    pack = load_pack(pack_dir)
    resources = run_stack(project_dir, args.stack)
    if args.preview:
        resources = as_first_preview(resources)
    diagnostics = evaluate(
        pack,
        resources,
        config,
        stack=args.stack,
        project=_project_name(project_dir),
        dry_run=True,
    )
    print(
        f"policy pack {pack.arguments['name']} ({pack_dir}) on stack {args.stack} of "
        f"{project_dir}: {len(resources)} resources",
        file=out,
    )
    report(diagnostics, out)
    return 1 if any(d.level == EnforcementLevel.MANDATORY for d in diagnostics) else 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except CheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse usage errors, or a program calling sys.exit
        return exc.code if isinstance(exc.code, int) else 2
    except Exception as exc:  # a failing program or pack: one line, not a traceback
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"error: {type(exc).__name__}: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
