"""The demo's clock: the real time, or the real time shifted so that a test pins "now".

`make demo` runs on the machine's clock. A test that must not depend on the hour
it runs at starts the demo at a fixed instant instead (`run_demo(..., now=...)`):
the demo and the handler it serves then read the same shifted clock, which keeps
ticking in real time (the Scheduler simulator really waits), so every schedule
time, forced-run lead and audit judgement is the one the pinned instant gives.
The handler process learns the shift from CLOCK_OFFSET_ENV
(`scheduler_dedup.localrun.clocked_handler`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta

CLOCK_OFFSET_ENV = "LOCALRUN_CLOCK_OFFSET_S"

Clock = Callable[[], datetime]


def shifted_clock(offset: timedelta) -> Clock:
    """The real UTC time plus `offset`."""
    return lambda: datetime.now(UTC) + offset


def pinned_at(now: datetime | None) -> timedelta:
    """The shift that makes the real clock read `now` at this moment (None: no shift)."""
    return timedelta(0) if now is None else now - datetime.now(UTC)


def clock_from_env(env: Mapping[str, str] = os.environ) -> Clock:
    """The clock a demo process serves on: shifted by CLOCK_OFFSET_ENV seconds, if set."""
    return shifted_clock(timedelta(seconds=float(env.get(CLOCK_OFFSET_ENV, "0"))))
