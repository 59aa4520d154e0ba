"""What a job function receives: the run's identity, a view of its lease, its durable work."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from runledger.exceptions import LeaseLost
from runledger.facts import TRIGGER_SCHEDULED
from runledger.ledger.lease import LeaseKeeper
from runledger.ledger.workitem import WorkItem
from runledger.sdk.work import RunWork

if TYPE_CHECKING:
    from runledger.ledger.run import RunIdentity

T = TypeVar("T")


@dataclass(frozen=True)
class RunContext:
    """Pass `run_id` downstream as an idempotency token: it is the same on every retry."""

    run_id: str
    job_name: str
    schedule_time: datetime
    attempt_id: str
    project: str
    region: str
    manual: bool
    body: bytes
    _lease: LeaseKeeper = field(repr=False)
    # Guards the lazy creation of this context's RunWork: jobs may use threads,
    # and two RunWork objects for one attempt would keep two separate caches.
    _work_lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )
    # What started this attempt (facts.TRIGGERS): a delivery, a catch-up or a backfill.
    trigger: str = TRIGGER_SCHEDULED
    # 0: the time's own run; N: its Nth rerun (`backfill --only all`), with its own `run_id`.
    generation: int = 0

    @classmethod
    def for_attempt(cls, run: RunIdentity, keeper: LeaseKeeper, body: bytes) -> RunContext:
        """The context of the attempt whose claim on `run` `keeper` holds.

        The one mapping from a claimed run to what its job sees, for the handler
        and for anything that drives an attempt the way the handler does.
        """
        return cls(
            run_id=run.key,
            job_name=run.job,
            schedule_time=run.schedule_time,
            attempt_id=keeper.claim.attempt_id,
            project=run.project,
            region=run.region,
            manual=run.manual,
            body=body,
            _lease=keeper,
            trigger=run.trigger,
            generation=run.generation,
        )

    def lease_held(self) -> bool:
        return self._lease.held()

    def ensure_lease(self) -> None:
        """Call between steps of long work: raises LeaseLost once another attempt took over."""
        if not self._lease.held():
            raise LeaseLost(f"attempt {self.attempt_id} lost its lease on run {self.run_id}")

    # Checkpoints and once-only outputs (see runledger.sdk.work). Nothing is read or
    # written until a job first uses one, so jobs that don't pay nothing.

    @property
    def _work(self) -> RunWork:
        with self._work_lock:
            work = self.__dict__.get("_work_state")
            if work is None:
                work = RunWork.for_lease(
                    self._lease, self.run_id, self.job_name, self.attempt_id, self.schedule_time
                )
                object.__setattr__(self, "_work_state", work)  # frozen: set once, here only
            return work

    def stage(self, name: str, fn: Callable[[], T]) -> T:
        """Run `fn` once per run; a later attempt gets the stored result instead of re-running."""
        return self._work.stage(name, fn)

    def checkpoint(self, name: str, result: Any = None) -> Any:
        """Record that stage `name` finished with a small result; the first result recorded wins."""
        return self._work.checkpoint(name, result)

    def completed_stages(self, names: Sequence[str]) -> dict[str, Any]:
        """Which of `names` earlier attempts finished, in order, with their results."""
        return self._work.completed_stages(names)

    def output(self, name: str, produce: Callable[[], T]) -> T:
        """The run's output `name`, produced at most once per run unless a crash hits mid-way."""
        return self._work.output(name, produce)

    def put_output(self, name: str, value: Any) -> Any:
        """Store output `name` once; a repeated attempt gets the value stored first."""
        return self._work.put_output(name, value)

    def find_output(self, name: str) -> WorkItem | None:
        return self._work.find_output(name)
