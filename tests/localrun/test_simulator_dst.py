"""The demo's Scheduler fires the times the audit expects, on daylight-saving days too.

Europe/Berlin skips 02:00-03:00 on 29 March 2026 and repeats 02:00-03:00 on
25 October 2026, so `30 2 * * *` has no 02:30 on the first day and two on the
second. The simulator and the audit list them with the same code; a simulator
firing at the end of the gap or twice in the repeat would have the audit report
a run missed or a run twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runledger.audit.expected import schedule_times
from runledger.schedules import JobSchedule
from scheduler_dedup.localrun.simulator import fire_times, next_fire_time

SCHEDULE = "30 2 * * *"
BERLIN = "Europe/Berlin"
JOB = JobSchedule(
    "nightly", SCHEDULE, BERLIN, timedelta(minutes=10), timedelta(minutes=3), False,
    timedelta(hours=1),
)  # fmt: skip


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("start", "end", "fired"),
    [
        # The gap: no 02:30 on the 29th; 02:30 CET is 01:30Z before, 02:30 CEST 00:30Z after.
        (
            utc(2026, 3, 27),
            utc(2026, 3, 31, 12),
            [utc(2026, 3, 27, 1, 30), utc(2026, 3, 28, 1, 30), utc(2026, 3, 30, 0, 30),
             utc(2026, 3, 31, 0, 30)],
        ),
        # The repeat: 02:30 on the 25th happens at 00:30Z (CEST) and 01:30Z (CET): one run.
        (
            utc(2026, 10, 23),
            utc(2026, 10, 27, 12),
            [utc(2026, 10, 23, 0, 30), utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30),
             utc(2026, 10, 26, 1, 30), utc(2026, 10, 27, 1, 30)],
        ),
    ],
    ids=["march-gap", "october-repeat"],
)  # fmt: skip
def test_the_simulators_fire_times_are_the_audits_expected_times(start, end, fired) -> None:
    expected = [run.schedule_time for run in schedule_times(JOB, start, end)]

    simulated = fire_times(SCHEDULE, BERLIN, end, len(fired))

    assert simulated == expected == fired


def test_the_next_fire_time_skips_the_gap_and_the_repeat_as_the_audit_does() -> None:
    after_gap = next_fire_time(SCHEDULE, BERLIN, utc(2026, 3, 28, 1, 30))
    after_repeat = next_fire_time(SCHEDULE, BERLIN, utc(2026, 10, 25, 0, 30))

    assert (
        after_gap == schedule_times(JOB, utc(2026, 3, 28, 1, 30), utc(2026, 3, 31))[0].schedule_time
    )
    assert after_gap == utc(2026, 3, 30, 0, 30)
    # 01:30Z is the same 02:30 again, not a second run: the next one is the 26th's.
    assert after_repeat == utc(2026, 10, 26, 1, 30)
