"""The stack as the policy engine sees it: one `StackResource` per registered resource.

`scheduler_dedup.offline.mockrun` records what the project's program registers under mocks; the
engine hands policies a slightly different picture (inputs for Analyze, inputs
plus provider-computed outputs for AnalyzeStack, property dependencies, provider
references). This module does that translation, and `as_first_preview` derives
the picture a first `pulumi preview` of a new stack would give (`--preview`),
where every provider-computed value, and every input built from one, is unknown.
It knows nothing of packs, config or the analyzer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from scheduler_dedup.offline.errors import CheckError


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
    """Adapts one `scheduler_dedup.offline.mockrun` record (object or mapping) to `StackResource`.

    Secrets are handed to the policies as plain values, as the engine does.
    """
    from scheduler_dedup.offline.captured import reveal

    inputs = reveal(_attr(record, "inputs") or {})
    outputs = reveal(_attr(record, "outputs"))
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


def run_stack(
    project_dir: Path, stack: str, virtualenv: Path | None = None, notes: list[str] | None = None
) -> list[StackResource]:
    """Runs the project's program for `stack` under mocks (`scheduler_dedup.offline.mockrun`);
    what the run had to stand in for is appended to `notes`."""
    from scheduler_dedup.offline import mockrun

    try:
        result = mockrun.run_program(project_dir, stack, virtualenv)
    except mockrun.ProgramFailed as exc:
        raise CheckError(str(exc)) from None
    if notes is not None:
        notes.extend(result.notes)
    return [stack_resource(record) for record in result]


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
