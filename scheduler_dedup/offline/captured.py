"""What an offline run captured, in the form the engine and CrossGuard policies see it.

A recorded value keeps what the engine knows about it: `Secret(value)` for a
secret, `UNKNOWN` for a value not known before the update (`reveal` gives the
plain data policies are handed). Registrations travel in wire form (the JSON of
the protobuf Struct the monitor received), so a run in the program's own
interpreter can send them back unchanged; `program_resources` turns that wire
result into `ProgramResources`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format, struct_pb2
from pulumi.runtime import rpc

STACK_TYPE = "pulumi:pulumi:Stack"


class Unknown:
    """A value the engine would not know before the update (a computed output, in preview)."""

    def __repr__(self) -> str:
        return "[unknown]"


UNKNOWN = Unknown()


@dataclass(frozen=True)
class Secret:
    """A value the program marked secret; `value` may itself be nested data."""

    value: Any

    def __repr__(self) -> str:
        return "[secret]"


def reveal(value: Any) -> Any:
    """`value` with every `Secret` replaced by its content (what policies are handed)."""
    if isinstance(value, Secret):
        return reveal(value.value)
    if isinstance(value, dict):
        return {key: reveal(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [reveal(item) for item in value]
    return value


def decode(value: Any) -> Any:
    """A wire value (protobuf Struct/ListValue/scalar) as Python data, secrets and unknowns kept
    where they are: the SDK's own decoder pushes a secret up to its enclosing map or list."""
    if isinstance(value, str) and value == rpc.UNKNOWN:
        return UNKNOWN
    if isinstance(value, struct_pb2.ListValue):
        return [decode(item) for item in value]
    if not isinstance(value, struct_pb2.Struct):
        return value
    if rpc._special_sig_key not in value:
        decoded = {key: decode(item) for key, item in value.items()}
        return {key: item for key, item in decoded.items() if item is not None}
    signature = value[rpc._special_sig_key]
    if signature == rpc._special_secret_sig:
        return Secret(decode(value["value"]))
    if signature == rpc._special_output_value_sig:
        inner = decode(value["value"]) if "value" in value else UNKNOWN
        return Secret(inner) if value.get("secret") else inner
    if signature == rpc._special_resource_sig:
        return value["urn"]
    return rpc.deserialize_properties(value)  # an asset or archive


@dataclass(frozen=True)
class CapturedResource:
    """One registered resource as the engine would see it.

    inputs: properties the program passed, in wire form (camelCase, floats).
    outputs: state after the (mock) create: inputs plus computed properties; for the
        root stack, the resolved stack outputs; for components, their registered outputs.
    parent: URN of the parent resource (None only for the root stack).
    dependencies: URNs from `depends_on` and from the Outputs used as inputs.
    property_dependencies: per input property, the URNs its value came from.
    provider: provider reference, or None for the default provider.
    protect: whether the resource was registered with `protect=True`.
    aliases: the URNs its `aliases` option says it had before, resolved as the engine
        does (an alias spec leaves out what did not change: name, type or parent).
    """

    type: str
    name: str
    urn: str
    id: str | None
    custom: bool
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    parent: str | None
    dependencies: tuple[str, ...]
    property_dependencies: dict[str, tuple[str, ...]] = field(default_factory=dict)
    provider: str | None = None
    protect: bool = False
    aliases: tuple[str, ...] = ()


class ProgramResources(list[CapturedResource]):
    """Every captured resource, plus the resolved stack outputs.

    Resources are in the order the monitor received them; independent resources
    register concurrently, so that order can differ between runs.
    """

    stack_outputs: dict[str, Any]
    notes: list[str]
    warnings: list[str]

    def __init__(
        self,
        resources: list[CapturedResource],
        stack_outputs: dict[str, Any],
        notes: list[str] | None = None,
        warnings: list[str] | None = None,
    ) -> None:
        super().__init__(resources)
        self.stack_outputs = stack_outputs
        # What the offline run had to stand in for (secure values, unanswered data sources).
        self.notes = notes or []
        # What the program logged as warnings (pulumi.log.warn).
        self.warnings = warnings or []

    def of_type(self, type_: str) -> list[CapturedResource]:
        """The resources with type token `type_`."""
        return [resource for resource in self if resource.type == type_]


def wire_json(struct: Any) -> dict[str, Any]:
    """A protobuf Struct as JSON data; `from_wire_json` turns it back."""
    return json_format.MessageToDict(struct)


def from_wire_json(data: Mapping[str, Any]) -> dict[str, Any]:
    struct = struct_pb2.Struct()
    json_format.ParseDict(dict(data), struct)
    decoded = decode(struct)
    return decoded if isinstance(decoded, dict) else {}


def captured_resource(record: Mapping[str, Any]) -> CapturedResource:
    """One monitor record (wire form) as a `CapturedResource`."""
    return CapturedResource(
        type=record["type"],
        name=record["name"],
        urn=record["urn"],
        id=record["id"],
        custom=record["custom"],
        inputs=from_wire_json(record["inputs"]),
        outputs=from_wire_json(record["outputs"]),
        parent=record["parent"],
        dependencies=tuple(record["dependencies"]),
        property_dependencies={
            key: tuple(urns) for key, urns in record["property_dependencies"].items()
        },
        provider=record["provider"],
        protect=record["protect"],
        aliases=tuple(record["aliases"]),
    )


def program_resources(wire: Mapping[str, Any]) -> ProgramResources:
    """A run's wire result (records, stack outputs, notes) as `ProgramResources`.

    The root stack's outputs are the resolved stack outputs.
    """
    stack_outputs = from_wire_json(wire["outputs"])
    resources = [
        dataclasses.replace(captured_resource(record), outputs=stack_outputs)
        if record["type"] == STACK_TYPE
        else captured_resource(record)
        for record in wire["records"]
    ]
    return ProgramResources(resources, stack_outputs, list(wire["notes"]), list(wire["warnings"]))
