"""An in-progress duplicate waits for the holder's outcome, so Scheduler records what happened.

A duplicate that meets a live lease is often Scheduler's own attempt: a retry
sent after the attempt deadline while the first attempt still works, or the
copy that won a front-end race. Answered 409 at once, Scheduler records a
failure for a run whose work then succeeds, and with `retryCount: 0` it never
learns otherwise. So the duplicate polls the run's record, one document read
per poll with a growing pause (0.5 s, 1 s, 2 s, then every 4 s), until the
holder has finished, its lease has run out, or the wait's budget is spent.

The budget ends before the job's attempt deadline: "If the request handler
does not respond by this deadline then the request is cancelled and the
attempt is marked as a DEADLINE_EXCEEDED failure" (Cloud Scheduler API,
`Job.attempt_deadline`). A margin of max(2 s, 10 %) is left for the answer
to travel and for the time the request spent before the handler saw it: the
budget counts from the request's start in the handler, and a cold start comes
before that. The 2 s floor covers the slowest cold start `make bench` measures
(a fresh handler process from spawn to exit, docs/benchmarks.md; a test holds
the floor to that figure) with room for the answer. Queueing comes before it
too: Cloud Run queues a request only while every instance is at its
concurrency and `maxInstances` is reached ("About container instance
autoscaling"), which the plan's capacity numbers keep clear of.

A wait that sees the holder's lease run out ends there, and the duplicate
claims the run itself (`runledger.delivery.pipeline`).

The core is pure: the clocks, the sleep and the record reader are injected,
so tests drive it without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from runledger.ledger.machine import may_take_over
from runledger.ledger.record import RunRecord, Status

FIRST_POLL_S = 0.5
MAX_POLL_S = 4.0
BACKOFF = 2.0
MIN_MARGIN_S = 2.0
MARGIN_SHARE = 0.1


def wait_budget(attempt_deadline: timedelta, lease: timedelta, cap: timedelta | None) -> float:
    """Seconds a duplicate may wait: inside the attempt deadline and the lease, at most `cap`.

    The lease bounds it too: it covers the Cloud Run request timeout, so the
    holder's request is over within one lease, and a longer wait could only
    watch its lease run out.
    """
    limit = min(attempt_deadline, lease).total_seconds()
    budget = limit - max(MIN_MARGIN_S, MARGIN_SHARE * limit)
    if cap is not None:
        budget = min(budget, cap.total_seconds())
    return max(budget, 0.0)


def holder_working(record: RunRecord | None, now: datetime) -> bool:
    """Whether the record still shows an attempt holding a live lease on the run."""
    return (
        record is not None
        and record.status is Status.IN_PROGRESS
        and not may_take_over(record, now)
    )


@dataclass(frozen=True)
class Waited:
    """The record as last read, and what the wait cost: seconds and document reads."""

    record: RunRecord | None
    waited_s: float
    polls: int


@dataclass(frozen=True)
class DuplicateWait:
    """How long an in-progress duplicate of each job may wait, and the clock it waits by.

    `deadlines` holds each job's attempt deadline from DEDUP_SCHEDULES. A job
    without an entry (the audit's own job among them) does not wait: its deadline
    is unknown, and an answer after it would reach nobody.
    """

    deadlines: Mapping[str, timedelta]
    lease: timedelta
    cap: timedelta | None
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def budget(self, job: str) -> float:
        deadline = self.deadlines.get(job)
        return 0.0 if deadline is None else wait_budget(deadline, self.lease, self.cap)

    def wait(
        self,
        job: str,
        spent_s: float,
        seen: RunRecord,
        read: Callable[[], RunRecord | None],
        now: Callable[[], datetime],
    ) -> Waited:
        """Poll `read` until the holder is done or what is left of the job's budget is spent.

        `spent_s` is how long the request has already taken (the claim's round
        trips), so it counts against the budget. `seen` is the record the claim
        found; `now` is the ledger's clock, by which a lease runs out.
        """
        started = self.monotonic()
        end = started + self.budget(job) - spent_s
        record: RunRecord | None = seen
        delay = FIRST_POLL_S
        polls = 0
        while holder_working(record, now()):
            remaining = end - self.monotonic()
            if remaining <= 0:
                break
            self.sleep(min(delay, remaining))
            record = read()
            polls += 1
            delay = min(delay * BACKOFF, MAX_POLL_S)
        return Waited(record, self.monotonic() - started, polls)
