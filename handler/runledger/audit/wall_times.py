"""Each schedule's wall-clock times, matched by croniter once per process and then reused.

Every audit lists each job's times from its watermark to now, and the next audit
lists nearly the same span again; croniter's matching is most of that CPU (the
simulator showed half of a seed's). A cron line's matches in a span do not
depend on where the listing starts, since croniter yields the times strictly
after its start in order, so the matches of (a, b] and (b, c] are those of
(a, c]. So a few spans per (schedule, zone) are kept, each extended on either
side as asked; a window touching none starts another. Pure: the answers are croniter's.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from zoneinfo import ZoneInfo

Instants = tuple[datetime, ...]
# How many (schedule, zone) pairs are kept, how many spans apart each (windows of
# other days: the simulator's seeds, a backfill), and the most times a span may hold:
# a 1-minute schedule over two weeks, past an audit's 20,000 reads (`expected.MAX_READS`).
_KEYS = 256
_SPANS = 8
_TIMES = 20_160


class _Span:
    """Every match in (lo, hi], oldest first, with each one's instants."""

    __slots__ = ("hi", "instants", "lo", "walls")

    def __init__(self, at: datetime) -> None:
        self.lo = self.hi = at
        self.walls: list[datetime] = []
        self.instants: list[Instants] = []


class WallTimes:
    """The naive wall times a cron line matches in a span, each resolved to its instants.

    `resolve(wall, zone)` says which UTC instants a wall time denotes; it must be
    pure, as its answers are kept. Safe across threads: one lock, never held
    while anything but croniter runs.
    """

    def __init__(self, resolve: Callable[[datetime, ZoneInfo], Instants]) -> None:
        self._resolve = resolve
        self._spans: OrderedDict[tuple[str, ZoneInfo], list[_Span]] = OrderedDict()
        self._lock = threading.Lock()

    def between(
        self, schedule: str, zone: ZoneInfo, first: datetime, last: datetime
    ) -> list[tuple[datetime, Instants]]:
        """The naive wall times `schedule` matches in (first, last], with their instants."""
        key = (schedule, zone)
        with self._lock:
            spans = self._spans.setdefault(key, [])
            self._spans.move_to_end(key)
            if len(self._spans) > _KEYS:
                self._spans.popitem(last=False)
            span = next((kept for kept in spans if first <= kept.hi and last >= kept.lo), None)
            if span is None:
                span = _Span(first)
                spans.append(span)
                if len(spans) > _SPANS:
                    spans.pop(0)
            if first < span.lo:
                walls = _matches(schedule, first, span.lo)
                span.instants[:0] = [self._resolve(wall, zone) for wall in walls]
                span.walls[:0] = walls
                span.lo = first
            if last > span.hi:
                walls = _matches(schedule, span.hi, last)
                span.instants.extend(self._resolve(wall, zone) for wall in walls)
                span.walls.extend(walls)
                span.hi = last
            if len(span.walls) > _TIMES:
                spans.remove(span)
            begin = bisect_right(span.walls, first)
            end = bisect_right(span.walls, last)
            return list(zip(span.walls[begin:end], span.instants[begin:end], strict=True))


def _matches(schedule: str, after: datetime, last: datetime) -> list[datetime]:
    """croniter's matches of `schedule` in (after, last], naive: pure wall-clock matching."""
    from croniter import croniter  # only the audit lists times: off a delivery's imports

    walls = croniter(schedule, after)
    found: list[datetime] = []
    while (wall := walls.get_next(datetime)) <= last:
        found.append(wall)
    return found
