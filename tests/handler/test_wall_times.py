"""The audit's kept listings answer what croniter answers fresh, whatever spans came before.

Audits list a job from its watermark to now, again and again, and the kept span
is extended on either side or replaced (`audit.wall_times`). Each listing below
comes after others that overlap it, touch it, lie inside it or weeks from it, at
instants that fall on, just before and just after a schedule time.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from runledger.audit.wall_times import WallTimes

ZONE = ZoneInfo("Europe/Berlin")
DAY = datetime(2026, 10, 24, 22)  # naive wall time: the night Berlin repeats 02:00-03:00


def fresh(schedule: str, first: datetime, last: datetime) -> list[datetime]:
    walls = croniter(schedule, first)
    found = []
    while (wall := walls.get_next(datetime)) <= last:
        found.append(wall)
    return found


def resolved(wall: datetime, zone: ZoneInfo) -> tuple[datetime, ...]:
    return (wall.replace(tzinfo=zone),)


def instant(rng: random.Random, day: datetime) -> datetime:
    """A time within two days of `day`, often exactly on a minute, sometimes just off one."""
    at = day + timedelta(minutes=rng.randrange(2 * 24 * 60))
    return at + rng.choice([timedelta(0), timedelta(microseconds=1), -timedelta(microseconds=1)])


@pytest.mark.parametrize("schedule", ["*/5 * * * *", "7 2 * * *", "0 0 1 1 *", "*/20 1-3 * * 0"])
def test_every_listing_is_croniters_whatever_came_before(schedule):
    rng = random.Random(schedule)
    walls = WallTimes(resolved)
    for _ in range(300):
        day = DAY + timedelta(days=rng.choice([0, 0, 40, 200]))  # kept spans far apart too
        first, last = sorted((instant(rng, day), instant(rng, day)))
        listed = walls.between(schedule, ZONE, first, last)
        expected = fresh(schedule, first, last)
        assert [wall for wall, _ in listed] == expected
        assert [instants for _, instants in listed] == [resolved(w, ZONE) for w in expected]


def test_a_schedule_croniter_refuses_is_refused_every_time():
    walls = WallTimes(resolved)
    for _ in range(2):
        with pytest.raises(ValueError):
            walls.between("61 * * * *", ZONE, DAY, DAY + timedelta(hours=1))


def test_zones_are_kept_apart():
    walls = WallTimes(lambda wall, zone: (wall.replace(tzinfo=zone),))
    utc = ZoneInfo("UTC")
    berlin = walls.between("0 * * * *", ZONE, DAY, DAY + timedelta(hours=2))
    other = walls.between("0 * * * *", utc, DAY, DAY + timedelta(hours=2))
    assert [instants[0].tzinfo for _, instants in berlin] == [ZONE, ZONE]
    assert [instants[0].tzinfo for _, instants in other] == [utc, utc]
