"""How a ledger dataclass becomes a Firestore document and back.

Run records and work items follow one rule, so that what the store writes and
what operators and other tools read stay in step: every field under its own
name, enum fields as their plain string values, and on reading, keys the
dataclass does not know (fields other tools or later versions add) are dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar, Self


class Document:
    """Mixin for a frozen dataclass stored as one document.

    `ENUM_FIELDS` names each enum-typed field and its enum, so reading turns the
    stored string back into the member.
    """

    ENUM_FIELDS: ClassVar[Mapping[str, type[StrEnum]]] = {}

    def to_document(self) -> dict[str, Any]:
        # A shallow copy: field values are immutable or owned by the record, and
        # dataclasses.asdict's deep copy is measurable on every claim.
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        for name in self.ENUM_FIELDS:
            data[name] = getattr(self, name).value
        return data

    @classmethod
    def from_document(cls, data: dict[str, Any]) -> Self:
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        values = {key: value for key, value in data.items() if key in names}
        for name, enum in cls.ENUM_FIELDS.items():
            values[name] = enum(values[name])
        return cls(**values)
