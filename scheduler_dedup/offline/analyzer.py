"""Driving the SDK's analyzer servicer the way the Pulumi engine does.

Rather than calling policies directly, `evaluate` sends the SDK's own
`_PolicyAnalyzerServicer` the gRPC messages the engine sends during a preview
(GetAnalyzerInfo, Configure, ConfigureStack, then Remediate and Analyze per
resource, then AnalyzeStack), with properties in wire form (protobuf Structs,
unknowns as the SDK's sentinel). Enforcement levels, remediations, config and
unknown values are therefore handled by the SDK's code, not re-implemented here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import struct_pb2
from pulumi.runtime import proto
from pulumi_policy import EnforcementLevel
from pulumi_policy.deserialize import serialize_properties
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from scheduler_dedup.offline.pack_loader import LoadedPack
from scheduler_dedup.offline.policy_config import (
    LEVEL_FROM_PROTO,
    PROTO_LEVEL,
    initial_config,
    policy_metadata,
    reconcile_config,
)
from scheduler_dedup.offline.stack_resources import StackResource


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
                level=LEVEL_FROM_PROTO[diagnostic.enforcementLevel],
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
    config = reconcile_config(policy_metadata(info), initial_config(info), policy_config or {})
    request = proto.ConfigureAnalyzerRequest()
    for name, (level, props) in config.items():
        entry = request.policyConfig[name]
        entry.enforcementLevel = PROTO_LEVEL[level]
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
