"""Each schedule's times in a window, listed once per seed's process (croniter is slow)."""

from __future__ import annotations

import functools
from datetime import datetime
from zoneinfo import ZoneInfo

from runledger.audit.expected import schedule_instants


@functools.lru_cache(maxsize=256)
def listed(
    schedule: str, zone: str, start: datetime, end: datetime
) -> tuple[tuple[datetime, ...], ...]:
    """`audit.expected.schedule_instants`, as the audit and the demo's Scheduler list them."""
    return tuple(schedule_instants(schedule, ZoneInfo(zone), start, end))
