"""A job's durable work for one run: finished stages (checkpoints) and once-only outputs.

Each item is its own small document next to the run record, created once and
never changed: the first attempt to write a name wins and every later attempt
reads that value back. Items copy the run's `expire_at`, so the same TTL that
removes the run removes its work.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Any, ClassVar

from runledger.ledger.document import Document

# Names become part of a Firestore document id; keep them short and plain.
ITEM_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
# Items are meant for small results (a cursor, a count, an object path, an
# execution name), not payloads: keep them well inside Firestore's 1 MiB document.
MAX_VALUE_BYTES = 64 * 1024


class WorkKind(StrEnum):
    CHECKPOINT = "checkpoint"
    OUTPUT = "output"


def item_id(kind: WorkKind, name: str) -> str:
    """The document id of an item: one namespace per kind, so a stage and an output never clash."""
    if not ITEM_NAME.fullmatch(name):
        raise ValueError(f"{kind.value} name {name!r} must match {ITEM_NAME.pattern}")
    return f"{kind.value}:{name}"


@dataclass(frozen=True)
class WorkItem(Document):
    ENUM_FIELDS: ClassVar[Mapping[str, type[StrEnum]]] = {"kind": WorkKind}

    kind: WorkKind
    name: str
    value: Any
    run_key: str
    job: str
    attempt_id: str
    written_at: datetime
    expire_at: datetime

    @property
    def id(self) -> str:
        return item_id(self.kind, self.name)


@dataclass(frozen=True)
class StoredItem:
    """An item with the store's version of it: the commit that created it."""

    item: WorkItem
    version: Any


def plain_value(value: Any) -> Any:
    """Check that `value` stores as-is in Firestore and return a detached copy of it.

    Only the types Firestore round-trips are accepted (tuples become lists, as
    Firestore would return them), so a job sees the same value whether it just
    wrote it or a later attempt read it back.
    """
    size = [0]

    def walk(item: Any, depth: int) -> Any:
        if depth > 20:
            raise ValueError("value is nested more than 20 levels deep")
        if item is None or isinstance(item, bool | int | float):
            size[0] += 8
            return item
        if isinstance(item, str | bytes):
            size[0] += len(item)
            return item
        if isinstance(item, datetime):
            if item.tzinfo is None:
                raise ValueError("datetimes in a stored value must be timezone-aware")
            size[0] += 8
            return item
        if isinstance(item, date):
            raise ValueError("store dates as ISO strings or timezone-aware datetimes")
        if isinstance(item, list | tuple):
            return [walk(element, depth + 1) for element in item]
        if isinstance(item, dict):
            copied = {}
            for key, element in item.items():
                if not isinstance(key, str):
                    raise ValueError(f"map keys in a stored value must be strings, not {key!r}")
                size[0] += len(key)
                copied[key] = walk(element, depth + 1)
            return copied
        raise ValueError(f"{type(item).__name__} is not storable; use JSON-like values")

    copied = walk(value, 0)
    if size[0] > MAX_VALUE_BYTES:
        raise ValueError(f"value is about {size[0]} bytes; the limit is {MAX_VALUE_BYTES}")
    return copied
