"""Checkpoints and once-only outputs for one attempt of one run.

A later attempt of the same run (a retry after a crash, a timeout or a
released failure) finds what earlier attempts finished and skips it. Every
write is fenced by the attempt's claim on the run, so an attempt that lost its
lease cannot record anything; the write also renews the lease. The ledger
makes those writes (`Ledger.write_item`); this module decides what to write
and remembers what it has seen.

While an attempt holds the lease no other attempt can write items, so what it
has read once stays true: lookups are cached and cost one round trip per name
at most (or one for a whole pipeline with `completed_stages`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from runledger.exceptions import LeaseLost
from runledger.ledger.lease import LeaseKeeper
from runledger.ledger.workitem import StoredItem, WorkItem, WorkKind, item_id, plain_value

T = TypeVar("T")


@dataclass(frozen=True)
class RunScope:
    """What every item of the run carries; `expire_at` matches the run record's."""

    run_key: str
    job: str
    attempt_id: str
    expire_at: datetime


class RunWork:
    def __init__(self, keeper: LeaseKeeper, scope: RunScope) -> None:
        self._keeper = keeper
        self._ledger = keeper.ledger
        self._scope = scope
        # Item id -> what the store holds; None means "known absent".
        self._known: dict[str, StoredItem | None] = {}
        self._known_lock = threading.Lock()

    @classmethod
    def for_lease(
        cls, keeper: LeaseKeeper, run_key: str, job: str, attempt_id: str, schedule_time: datetime
    ) -> RunWork:
        # Work items expire with the run.
        expire_at = keeper.ledger.expire_at(schedule_time)
        return cls(keeper, RunScope(run_key, job, attempt_id, expire_at))

    # -- checkpoints -------------------------------------------------------

    def stage(self, name: str, fn: Callable[[], T]) -> T:
        """Run `fn` unless an earlier attempt finished this stage; return its result either way."""
        found = self._lookup(WorkKind.CHECKPOINT, [name])[name]
        if found is not None:
            return found.item.value
        self._require_lease()
        return self._create(WorkKind.CHECKPOINT, name, fn())

    def checkpoint(self, name: str, result: Any = None) -> Any:
        """Record that stage `name` finished; if it already had, return the first result."""
        return self._create(WorkKind.CHECKPOINT, name, result)

    def completed_stages(self, names: Sequence[str]) -> dict[str, Any]:
        """Finished stages among `names`, in that order, with their results: one round trip.

        The last key is where a resumed attempt picks up; later `stage()` calls
        for these names are answered from memory.
        """
        found = self._lookup(WorkKind.CHECKPOINT, names)
        return {name: stored.item.value for name, stored in found.items() if stored is not None}

    # -- once-only outputs -------------------------------------------------

    def output(self, name: str, produce: Callable[[], T]) -> T:
        """Return the run's output `name`, calling `produce` only if no attempt has stored it.

        A crash after `produce` and before the write lets a later attempt call
        it again: pass `ctx.run_id` and `name` to whatever `produce` changes, so
        that system can recognise the repeat.
        """
        found = self._lookup(WorkKind.OUTPUT, [name])[name]
        if found is not None:
            return found.item.value
        self._require_lease()
        return self._create(WorkKind.OUTPUT, name, produce())

    def put_output(self, name: str, value: Any) -> Any:
        """Store output `name` once; if it exists, the stored value wins and is returned."""
        return self._create(WorkKind.OUTPUT, name, value)

    def find_output(self, name: str) -> WorkItem | None:
        found = self._lookup(WorkKind.OUTPUT, [name])[name]
        return None if found is None else found.item

    # -- internals ---------------------------------------------------------

    def _require_lease(self) -> None:
        if not self._keeper.held():
            raise LeaseLost(
                f"attempt {self._scope.attempt_id} lost its lease on run {self._scope.run_key}"
            )

    def _lookup(self, kind: WorkKind, names: Sequence[str]) -> dict[str, StoredItem | None]:
        ids = {name: item_id(kind, name) for name in names}
        with self._known_lock:
            missing = [i for i in ids.values() if i not in self._known]
        if missing:
            fetched = self._ledger.items(self._scope.run_key, missing)
            with self._known_lock:
                for i in missing:
                    self._known.setdefault(i, fetched.get(i))
        with self._known_lock:
            return {name: self._known[i] for name, i in ids.items()}

    def _create(self, kind: WorkKind, name: str, value: Any) -> Any:
        value = plain_value(value)  # a bad value fails here, before any write
        key = item_id(kind, name)
        with self._known_lock:
            known = self._known.get(key)
        if known is not None:
            return known.item.value
        scope = self._scope
        item = WorkItem(
            kind=kind,
            name=name,
            value=value,
            run_key=scope.run_key,
            job=scope.job,
            attempt_id=scope.attempt_id,
            written_at=self._ledger.now(),
            expire_at=scope.expire_at,
        )
        stored = self._keeper.fenced_write(lambda claim: self._ledger.write_item(claim, item))
        with self._known_lock:
            self._known[key] = stored
        return stored.item.value
