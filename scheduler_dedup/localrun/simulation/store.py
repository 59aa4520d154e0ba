"""The store the simulated handler sees: a real store, with faults at every call.

Every store call is a step boundary. Before it the fault plan may make the
store unreachable (an outage window, or one failed call: `StoreUnavailable`,
nothing applied) or kill the calling instance; a write may apply and then lose
its answer (`StoreUnavailable` after applying) or kill the instance right after
it landed. Faults hit only handler tasks: the operator's CLI and the oracle's own
peeks are not faulted. A partition cuts one instance off (its renewals too) for a
while as the others go on. Every write to a run record is reported to the history
(`History.record_written`) as the store holds it afterwards, so the oracle sees
each status a run went through, whoever wrote it; a fenced write refused is
reported too, with the task whose write it was (`History.refused`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from runledger.exceptions import StoreUnavailable, VersionConflict
from runledger.ledger.record import RunRecord
from scheduler_dedup.localrun.simulation.clock import Killed, Loop, Task

_READS = frozenset(
    {
        "get",
        "get_many",
        "get_items",
        "get_epochs",
        "get_lasting_epochs",
        "get_shards",
        "get_slot",
        "get_suspension",
    }
)
# Each write of run records, and which arguments name them (a dead holder's too).
_RUN_WRITES = {
    "create": (0,),
    "update": (0,),
    "create_item_fenced": (0,),
    "delete_items_fenced": (0,),
    "claim_slotted": (0, 5),
    "update_slotted": (0,),
}
_AUDIT_WRITES = frozenset(
    {
        "create_epoch",
        "replace_epoch",
        "create_shard",
        "replace_shard",
        "create_suspension",
        "replace_suspension",
    }
)
_SAVES = frozenset({"create_shard", "replace_shard"})  # an audit's watermarks written
FAULTS = ("fail", "lost", "kill_before", "kill_after")


@dataclass
class FaultPlan:
    """Which calls fail: outage windows and a per-call chance of each fault."""

    rng: random.Random
    rate: float
    outages: tuple[tuple[datetime, datetime], ...] = ()
    # (call, fault) pairs never drawn: a fault class held back until its fix lands.
    spared: frozenset[tuple[str, str]] = frozenset()
    # The chance that a call cuts its instance off from the store for a while.
    partition_rate: float = 0.0
    quiet_until: datetime | None = None  # no faults before: the first audit records epochs
    # Whether an audit that saved its watermarks may still die or lose its lease before it
    # logs its findings (the class `audit_crash_after_save` holds back).
    crash_after_save: bool = True
    # The chance that a slotted claim (overlap skip or delay) lands and loses its answer.
    lost_claims: float = 0.0
    # No faults from here on: the faults heal once every judged time's last attempt is
    # over, so the world can show it settles (Jepsen's final heal before the check).
    healed_at: datetime | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def draw(self, now: datetime, name: str, write: bool) -> str | None:
        if self.quiet_until is not None and now < self.quiet_until:
            return None
        if self.healed_at is not None and now >= self.healed_at:
            return None
        if any(start <= now < end for start, end in self.outages):
            return "outage"
        if name == "claim_slotted" and self.lost_claims and self.rng.random() < self.lost_claims:
            self.counts["lost"] = self.counts.get("lost", 0) + 1
            return "lost"
        if self.partition_rate and self.rng.random() < self.partition_rate:
            self.counts["partition"] = self.counts.get("partition", 0) + 1
            return "partition"
        if self.rng.random() >= self.rate:
            return None
        kind = self.rng.choice(FAULTS if write else ("fail", "kill_before"))
        if (name, kind) in self.spared:
            return None
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return kind


class FaultyStore:
    """Wraps a store (memory or Firestore) with the plan's faults; same methods, same errors."""

    def __init__(
        self,
        inner: Any,
        loop: Loop,
        plan: FaultPlan,
        written: Callable[[str, RunRecord | None], None],
        refused: Callable[[str, Task | None], None] = lambda key, task: None,
    ) -> None:
        self.inner = inner
        self._loop = loop
        self._plan = plan
        self._written = written
        self._refused = refused

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name not in _READS and name not in _RUN_WRITES and name not in _AUDIT_WRITES:
            return method
        slots = _RUN_WRITES.get(name, ())
        return lambda *args: self.call(
            name, method, args, name not in _READS, [args[i] for i in slots if args[i] is not None]
        )

    def call(
        self,
        name: str,
        method: Callable[..., Any],
        args: tuple[Any, ...],
        write: bool,
        run_keys: list[str],
    ) -> Any:
        """One store call at a step boundary; `run_keys`: the run records it writes."""
        task = self._loop.current
        now = self._loop.now
        # An audit past its watermark write is spared while that class is held back.
        spared = task is None or (task.saved and not self._plan.crash_after_save)
        if not spared and task.cut_until is not None and now < task.cut_until:
            raise StoreUnavailable(f"simulated partition of this instance before {name}")
        fault = None if spared else self._plan.draw(now, name, write)
        if fault == "partition" and task is not None:
            task.cut_until = now + timedelta(seconds=self._plan.rng.randint(30, 150))
            raise StoreUnavailable(f"simulated partition of this instance before {name}")
        if fault in ("outage", "fail"):
            raise StoreUnavailable(f"simulated store {fault} before {name}")
        if fault == "kill_before" and task is not None:
            task.kill()
            raise Killed
        try:
            result = method(*args)
        except VersionConflict:
            for key in run_keys:
                self._refused(key, task)
            raise
        if task is not None and name in _SAVES:
            task.saved = True
        for key in run_keys:
            found = self.inner.get(key)
            self._written(key, None if found is None else found.record)
        if fault == "lost":
            raise StoreUnavailable(f"simulated lost answer of {name}")
        if fault == "kill_after" and task is not None:
            task.kill()
            raise Killed
        return result


class FaultyDocs:
    """The backfill documents (`backfill.queue.BackfillDocs`) with the same faults."""

    def __init__(self, inner: Any, loop: Loop, plan: FaultPlan) -> None:
        self._inner = inner
        self._store = FaultyStore(inner, loop, plan, lambda key, record: None)

    def get(self, key: str) -> tuple[dict[str, Any], Any] | None:
        return self._store.call("get", self._inner.get, (key,), False, [])

    def create(self, key: str, data: Any) -> Any:
        return self._store.call("create", self._inner.create, (key, data), True, [])

    def update(self, key: str, changes: Any, version: Any) -> Any:
        return self._store.call("update", self._inner.update, (key, changes, version), True, [])
