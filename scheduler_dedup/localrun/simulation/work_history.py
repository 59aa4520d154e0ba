"""The oracle's rules for job bodies that checkpoint and emit once-only outputs (`job_work`).

Such a body (`work.staged_work`) works in stages, each through `ctx.stage`, then
emits its effect once through `ctx.output`: the effect is what `produce` does.
`ItemWatch` sits between the faulty store and the real one, so it sees each work
item write that landed (a lost answer or a kill after it included) and each delete.
The rules, each a violation when broken (docs/reliability.md, "The oracle"):

    stage redone              a stage's work started again after its checkpoint landed
    output produced twice     `produce` started again after the output landed
    checkpoint value changed  `ctx.stage` answered another value than the one stored
    completed without output  a run recorded completed whose output never landed
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runledger.ledger.record import Status
from runledger.ledger.workitem import WorkItem, WorkKind, item_id
from scheduler_dedup.localrun.simulation.violation import Violation

OUTPUT = "report"
OUTPUT_ID = item_id(WorkKind.OUTPUT, OUTPUT)


def stage_name(index: int) -> str:
    return f"step{index}"


@dataclass
class _Item:
    value: Any
    landed: datetime
    deleted: datetime | None = None


@dataclass
class WorkHistory:
    """What work items landed, what the bodies started and what `ctx.stage` answered them."""

    items: dict[tuple[str, str], list[_Item]] = field(default_factory=lambda: defaultdict(list))
    violations: list[Violation] = field(default_factory=list)
    runs: set[str] = field(default_factory=set)  # run keys whose bodies use work items

    def landed(self, key: str, item: WorkItem, now: datetime) -> None:
        self.items[key, item.id].append(_Item(item.value, now))

    def deleted(self, key: str, ids: Sequence[str], now: datetime) -> None:
        for found in ids:
            for item in self.items.get((key, found), []):
                if item.deleted is None:
                    item.deleted = now

    def stored(self, key: str, found: str, now: datetime) -> _Item | None:
        """The item under `found` that the store held at `now`, if any."""
        for item in self.items.get((key, found), []):
            if item.landed <= now and (item.deleted is None or item.deleted > now):
                return item
        return None

    def starts(self, context: Any, kind: WorkKind, name: str, now: datetime) -> None:
        """A stage's work or an output's `produce` starts: nothing must have landed for it."""
        self.runs.add(context.run_id)
        held = self.stored(context.run_id, item_id(kind, name), now)
        if held is None:
            return
        rule = "stage redone" if kind is WorkKind.CHECKPOINT else "output produced twice"
        self.violations.append(
            Violation(
                context.job_name,
                context.schedule_time,
                rule,
                f"attempt {context.attempt_id} started {kind.value} {name!r} at {now:%H:%M:%S}; "
                f"it landed at {held.landed:%H:%M:%S}",
            )
        )

    def answered(self, context: Any, name: str, value: Any, now: datetime) -> None:
        """`ctx.stage(name)` answered `value`: the value the store holds."""
        held = self.stored(context.run_id, item_id(WorkKind.CHECKPOINT, name), now)
        if held is not None and held.value == value:
            return
        self.violations.append(
            Violation(
                context.job_name,
                context.schedule_time,
                "checkpoint value changed",
                f"attempt {context.attempt_id} got {value!r} from stage {name!r} at "
                f"{now:%H:%M:%S}; the store held {None if held is None else held.value!r}",
            )
        )

    def check(self, records: dict[str, list[tuple[datetime, Any]]]) -> list[Violation]:
        """The history's own violations, then each completed run whose output never landed."""
        found = list(self.violations)
        for key in sorted(self.runs):
            for when, record in records.get(key, []):
                if record is None or record.status is not Status.COMPLETED:
                    continue
                if self.stored(key, OUTPUT_ID, when) is None:
                    found.append(
                        Violation(
                            record.job,
                            record.schedule_time,
                            "completed without output",
                            f"recorded completed at {when:%H:%M:%S} ({record.attempt_id}); "
                            f"output {OUTPUT!r} never landed",
                        )
                    )
                break
        return found


class ItemWatch:
    """The real store, telling `WorkHistory` of each item write that landed and each delete."""

    def __init__(self, inner: Any, work: WorkHistory, now: Callable[[], datetime]) -> None:
        self._inner = inner
        self._work = work
        self._now = now

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create_item_fenced(self, key: str, version: Any, changes: Any, item: WorkItem) -> Any:
        result = self._inner.create_item_fenced(key, version, changes, item)
        self._work.landed(key, item, self._now())
        return result

    def delete_items_fenced(self, key: str, version: Any, changes: Any, ids: Any) -> Any:
        result = self._inner.delete_items_fenced(key, version, changes, ids)
        self._work.deleted(key, ids, self._now())
        return result
