"""The daylight-saving advice: which local schedules fire in a clock change, and the words.

The rule looks a year ahead from today, so these tests fix "today" and call
the rule's own function; `test_policy_rules` runs it through the pack.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dedup_policies.dst_rules import advice

TODAY = datetime(2026, 12, 1, 9, 17, tzinfo=UTC)


def test_a_berlin_job_at_0230_is_told_the_skipped_and_the_repeated_night() -> None:
    message = advice("nightly-report", "30 2 * * *", "Europe/Berlin", TODAY)
    assert message is not None
    assert message.startswith("Job 'nightly-report' runs on local time in Europe/Berlin")
    assert "2027-03-28 02:30 is skipped (clocks jump from 02:00 to 03:00): no run that night" in (
        message
    )
    assert "2027-10-31 02:30 occurs twice (clocks go back from 03:00 to 02:00)" in message
    assert message.endswith("Schedule it in UTC, or at a local time outside 02:00-03:00.")


def test_a_time_only_the_autumn_change_repeats_names_only_that_date() -> None:
    message = advice("sync", "30 1 * * *", "America/New_York", TODAY)
    assert message is not None
    assert "2027-11-07 01:30 occurs twice" in message
    assert "skipped" not in message


def test_a_half_hour_change_is_seen_too() -> None:
    message = advice("x", "0 2 * * *", "Australia/Lord_Howe", TODAY)
    assert message is not None and "clocks jump from 02:00 to 02:30" in message


def test_a_weekday_schedule_fires_in_the_change_only_when_the_change_falls_on_its_days() -> None:
    # Europe's changes fall on Sundays: a weekday job at 02:30 is clear of them.
    assert advice("x", "30 2 * * 1-5", "Europe/Berlin", TODAY) is None
    assert advice("x", "30 2 * * SUN", "Europe/Berlin", TODAY) is not None


@pytest.mark.parametrize(
    ("schedule", "zone"),
    [
        ("30 3 * * *", "Europe/Berlin"),  # the example stack's nightly report
        ("30 2 * * *", "UTC"),
        ("0 7 * * 1-5", "America/New_York"),
        ("30 2 * * *", "Asia/Tokyo"),  # no daylight saving
        ("every 5 minutes", "Europe/Berlin"),  # not unix-cron: the unix-cron rule's
        ("30 2 * * *", "Mars/Olympus"),  # not a zone
    ],
)
def test_schedules_clear_of_any_change_get_no_advice(schedule: str, zone: str) -> None:
    assert advice("x", schedule, zone, TODAY) is None
