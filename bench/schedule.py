"""Deliveries as Cloud Scheduler sends them, with schedule times nobody has used yet.

Times step back one millisecond at a time from two hours ago: far enough in
the past that a lease set "now" is long expired when the reclaim scenario
needs it, never in the future (the handler treats a time more than 10 s ahead
as a forced run), and dense enough that millions of deliveries stay inside
the one-day retention the handler checks. Both sides key runs with the same
parser, so the fractional seconds cost neither side anything extra.
"""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime, timedelta

from runledger.delivery.identify import schedule_time_text, scheduler_headers

JOB = "bench-noop"
PROJECT = "bench-project"
REGION = "bench-region"
START_BEFORE_NOW = timedelta(hours=2)

Headers = list[tuple[str, str]]


def rfc3339(moment: datetime) -> str:
    return schedule_time_text(moment, timespec="milliseconds")


class ScheduleTimes:
    """Hands out unique schedule times; safe to share between threads."""

    def __init__(self, now: datetime | None = None) -> None:
        start = (now or datetime.now(UTC)) - START_BEFORE_NOW
        self._start = start.replace(microsecond=0)
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def next(self) -> datetime:
        with self._lock:
            step = next(self._counter)
        return self._start - timedelta(milliseconds=step)


def delivery_headers(schedule_time: datetime, job: str = JOB) -> Headers:
    """The headers of one scheduled delivery, including the project and region ones."""
    return scheduler_headers(job, rfc3339(schedule_time), PROJECT, REGION)
