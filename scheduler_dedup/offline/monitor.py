"""The resource monitor an offline run registers with: it records every registration.

Pulumi's stock `MockMonitor` answers registrations but drops parents,
dependencies, providers and aliases; `CapturingMonitor` keeps them, in wire form
(see `scheduler_dedup.offline.captured`).
"""

from __future__ import annotations

from typing import Any

from pulumi.runtime.mocks import MockMonitor, Mocks

from scheduler_dedup.offline.captured import STACK_TYPE, wire_json


class CapturingMonitor(MockMonitor):
    """The stock mock monitor drops parents and dependencies; this one records them.

    Each record keeps properties in wire form (JSON of the protobuf Struct), so a
    run in the program's own interpreter can hand them back unchanged.
    """

    def __init__(self, mocks: Mocks) -> None:
        super().__init__(mocks)
        self.records: list[dict[str, Any]] = []

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        custom = bool(request.custom)
        self.records.append(
            {
                "type": request.type,
                "name": request.name,
                "urn": response.urn,
                "id": response.id or None,
                "custom": custom,
                "inputs": wire_json(request.object) if request.type != STACK_TYPE else {},
                "outputs": wire_json(response.object) if custom else {},
                "parent": request.parent or None,
                "dependencies": list(request.dependencies),
                "property_dependencies": {
                    key: list(value.urns) for key, value in request.propertyDependencies.items()
                },
                "provider": request.provider or None,
                "protect": bool(request.protect),
                "aliases": [self._alias_urn(request, alias) for alias in request.aliases],
            }
        )
        return response

    def _alias_urn(self, request: Any, alias: Any) -> str:
        """The previous URN one alias names: a full URN, or a spec of what differed."""
        if alias.WhichOneof("alias") == "urn":
            return alias.urn
        spec = alias.spec
        parent = "" if spec.noParent else (spec.parentUrn or request.parent)
        return self.make_urn(parent, spec.type or request.type, spec.name or request.name)

    def RegisterResourceOutputs(self, request: Any) -> Any:
        for record in self.records:
            if record["urn"] == request.urn and not record["custom"]:
                record["outputs"] = wire_json(request.outputs)
        return super().RegisterResourceOutputs(request)
