"""The simulator fires cron schedules in their time zone and sends what Cloud Scheduler sends."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from runledger.delivery.identify import parse_schedule_time
from runledger.facts import JOB_HEADER, SCHEDULE_HEADER, RetryPolicy
from scheduler_dedup.localrun.simulator import (
    RunPlan,
    SimJob,
    build_request,
    fire_times,
    next_fire_time,
    render_schedule_time,
)

NOW = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)


def test_fire_times_are_the_last_runs_before_now_in_the_job_time_zone() -> None:
    # 02:30 in Berlin is 01:30 UTC in winter.
    times = fire_times("30 2 * * *", "Europe/Berlin", NOW, 3)
    assert times == [
        datetime(2026, 11, 28, 1, 30, tzinfo=UTC),
        datetime(2026, 11, 29, 1, 30, tzinfo=UTC),
        datetime(2026, 11, 30, 1, 30, tzinfo=UTC),
    ]


def test_fire_times_include_a_run_exactly_at_now() -> None:
    assert fire_times("0 2 * * *", "UTC", NOW, 1) == [NOW]


def test_weekday_schedule_skips_the_weekend_across_a_dst_zone() -> None:
    # 2026-11-30 is a Monday; 07:00 New York is 12:00 UTC in winter.
    times = fire_times("0 7 * * 1-5", "America/New_York", NOW, 3)
    assert [t.weekday() for t in times] == [2, 3, 4]  # Wed, Thu, Fri
    assert {t.hour for t in times} == {12}


def test_fire_times_follow_daylight_saving_time() -> None:
    summer = fire_times("0 7 * * *", "America/New_York", datetime(2026, 7, 1, tzinfo=UTC), 1)
    assert summer[0].hour == 11  # EDT is UTC-4


def test_next_fire_time_is_strictly_after() -> None:
    assert next_fire_time("0 2 * * *", "UTC", NOW) == datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


def test_every_rendering_of_a_schedule_time_is_the_same_instant_to_the_handler() -> None:
    when = datetime(2026, 11, 28, 1, 30, tzinfo=UTC)
    rendered = {render_schedule_time(when, "America/New_York", style) for style in range(3)}
    assert rendered == {
        "2026-11-28T01:30:00Z",
        "2026-11-27T20:30:00-05:00",
        "2026-11-28T01:30:00+00:00",
    }
    assert {parse_schedule_time(text) for text in rendered} == {when}


def test_requests_carry_scheduler_and_target_headers_in_varying_case() -> None:
    job = SimJob(
        id="nightly-report",
        schedule="30 2 * * *",
        time_zone="Europe/Berlin",
        attempt_deadline_s=2.5,
        retry=RetryPolicy(),
        headers=(("X-Dedup-Project", "p1"), ("X-Dedup-Region", "r1")),
        body=b'{"report": "sales"}',
    )
    plan = RunPlan("nightly-report", datetime(2026, 11, 28, 1, 30, tzinfo=UTC), False, None, ())
    rng = random.Random(3)
    requests = [build_request(job, plan, rng) for _ in range(40)]
    spellings = set()
    for request in requests:
        headers = {name.lower(): value for name, value in request.headers}
        assert headers[JOB_HEADER.lower()] == "nightly-report"
        assert parse_schedule_time(headers[SCHEDULE_HEADER.lower()]) == plan.schedule_time
        assert headers["x-dedup-project"] == "p1"
        assert headers["x-dedup-region"] == "r1"
        assert request.body == b'{"report": "sales"}'
        spellings.add(
            next(name for name, _ in request.headers if name.lower() == "x-cloudscheduler-jobname")
        )
    assert spellings == {
        "X-CloudScheduler-JobName",
        "X-Cloudscheduler-Jobname",
        "x-cloudscheduler-jobname",
    }
