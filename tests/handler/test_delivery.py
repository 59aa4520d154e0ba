"""Headers to run identity: case, offsets, forced runs and refusals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runledger.delivery.identify import identify_delivery, identify_run, parse_schedule_time
from runledger.exceptions import BadRequest
from tests.handler.support import LEASE, T0, scheduler_headers, settings

JOBS = {"nightly-report": object(), "weekly-digest": object()}
NOW = T0 + timedelta(seconds=3)


def identify(headers, now=NOW, **env):
    return identify_run(headers, settings(**env), JOBS, now)


@pytest.mark.parametrize(
    "stamp",
    [
        "2026-10-16T12:00:00Z",
        "2026-10-16T05:00:00-07:00",
        "2026-10-16T17:30:00+05:30",
        "2026-10-16t12:00:00.000000z",
        "2026-10-16T12:00:00.000000000Z",
    ],
)
def test_every_offset_of_one_instant_is_the_same_run(stamp):
    assert identify(scheduler_headers(schedule_time=stamp)).key == identify(scheduler_headers()).key


def test_header_names_are_case_insensitive():
    lower = [(name.lower(), value) for name, value in scheduler_headers()]
    upper = [(name.upper(), value) for name, value in scheduler_headers()]
    assert identify(lower).key == identify(upper).key == identify(scheduler_headers()).key


def test_key_is_a_fixed_length_hash_that_separates_project_region_job_and_time():
    base = identify(scheduler_headers())
    assert len(base.key) == 64
    variants = [
        scheduler_headers(project="acme-staging"),
        scheduler_headers(region="us-central1"),
        scheduler_headers(schedule_time="2026-10-16T11:59:00Z"),
    ]
    keys = {identify(headers).key for headers in variants}
    assert base.key not in keys
    assert len(keys) == 3


def test_schedule_time_is_normalised_to_utc():
    run = identify(scheduler_headers(schedule_time="2026-10-16T05:00:00-07:00"))
    assert run.schedule_time == T0
    assert run.schedule_time.tzinfo == UTC


def test_forced_run_carrying_the_next_schedule_time_gets_its_own_key():
    next_run = "2026-10-16T13:00:00Z"
    forced = identify(scheduler_headers(schedule_time=next_run))
    assert forced.manual
    real = identify(scheduler_headers(schedule_time=next_run), now=T0 + timedelta(hours=1))
    assert not real.manual
    assert forced.key != real.key
    again = identify(scheduler_headers(schedule_time=next_run))
    assert again.key == forced.key


def test_forced_runs_can_be_rejected():
    with pytest.raises(BadRequest) as refused:
        identify(
            scheduler_headers(schedule_time="2026-10-16T13:00:00Z"), DEDUP_MANUAL_RUNS="reject"
        )
    assert refused.value.status == 403


def unstamped(**extra: str) -> list[tuple[str, str]]:
    """A forced run as Cloud Scheduler may send it: no X-CloudScheduler-ScheduleTime at all."""
    return [h for h in scheduler_headers(**extra) if "ScheduleTime" not in h[0]]


def test_forced_run_without_schedule_time_is_keyed_by_its_arrival_window():
    run = identify_delivery(unstamped(), settings(), JOBS, T0 + timedelta(seconds=10))
    assert run.run.manual
    assert run.run.schedule_time == T0  # the start of the lease-long window it arrived in
    assert run.earlier is not None
    assert run.earlier.schedule_time == T0 - LEASE
    assert run.earlier.manual
    later_copy = identify_delivery(unstamped(), settings(), JOBS, T0 + LEASE - timedelta(seconds=1))
    assert later_copy.run.key == run.run.key
    next_window = identify_delivery(unstamped(), settings(), JOBS, T0 + LEASE)
    assert next_window.earlier.key == run.run.key
    stamped_keys = {
        identify(scheduler_headers(schedule_time=T0.isoformat()), now=now).key
        for now in (T0 - timedelta(hours=1), T0 + timedelta(seconds=1))
    }
    assert run.run.key not in stamped_keys
    other_job = identify_delivery(
        unstamped(job="weekly-digest"), settings(), JOBS, T0 + timedelta(seconds=10)
    )
    assert other_job.run.key != run.run.key


def test_forced_run_without_schedule_time_is_rejected_when_forced_runs_are():
    with pytest.raises(BadRequest) as refused:
        identify(unstamped(), DEDUP_MANUAL_RUNS="reject")
    assert refused.value.status == 403
    assert "X-CloudScheduler-ScheduleTime" in refused.value.reason


@pytest.mark.parametrize(
    ("headers", "status", "reason"),
    [
        ([h for h in scheduler_headers() if "JobName" not in h[0]], 400, "missing header"),
        (scheduler_headers(job=""), 400, "missing header"),
        (scheduler_headers(job="a/b"), 400, "not a Cloud Scheduler job id"),
        (scheduler_headers(job="unknown-job"), 404, "unknown job"),
        (scheduler_headers(schedule_time="yesterday"), 400, "not an RFC 3339"),
        (scheduler_headers(schedule_time="2026-10-16 12:00:00"), 400, "not an RFC 3339"),
        (scheduler_headers(schedule_time="2026-10-16T12:00:00"), 400, "not an RFC 3339"),
        (scheduler_headers(schedule_time="2026-13-16T12:00:00Z"), 400, "out of range"),
        (scheduler_headers(schedule_time="2026-10-16T23:59:60Z"), 400, "leap second"),
        (scheduler_headers(schedule_time="2026-10-16T12:00:00+24:00"), 400, "invalid UTC offset"),
        (scheduler_headers(schedule_time="2026-09-01T12:00:00Z"), 400, "older than the ledger"),
        (scheduler_headers(schedule_time="2030-01-01T00:00:00Z"), 400, "days ahead"),
        (scheduler_headers(project="acme prod"), 400, "not a valid identifier"),
        ([*scheduler_headers(), ("x-cloudscheduler-jobname", "x")], 400, "repeated"),
        ([h for h in scheduler_headers() if "Region" not in h[0]], 400, "missing header"),
        (scheduler_headers(schedule_time=""), 400, "missing header"),
        (
            [*scheduler_headers(), ("X-CloudScheduler-ScheduleTime", "2026-10-16T12:00:00Z")],
            400,
            "repeated",
        ),
    ],
)
def test_bad_deliveries_are_refused_with_a_reason(headers, status, reason):
    with pytest.raises(BadRequest) as refused:
        identify(headers)
    assert refused.value.status == status
    assert reason in refused.value.reason


def test_only_configured_projects_and_regions_are_served():
    with pytest.raises(BadRequest) as refused:
        identify(scheduler_headers(project="other-proj"), DEDUP_ALLOWED_PROJECTS="acme-prod")
    assert refused.value.status == 403
    allowed = identify(
        scheduler_headers(),
        DEDUP_ALLOWED_PROJECTS="acme-prod",
        DEDUP_ALLOWED_REGIONS="europe-west1,us-central1",
    )
    assert allowed.project == "acme-prod"


def test_custom_header_names_are_read():
    headers = [
        ("X-CloudScheduler-JobName", "nightly-report"),
        ("X-CloudScheduler-ScheduleTime", "2026-10-16T12:00:00Z"),
        ("X-Team-Project", "acme-prod"),
        ("X-Team-Region", "europe-west1"),
    ]
    run = identify(
        headers, DEDUP_PROJECT_HEADER="X-Team-Project", DEDUP_REGION_HEADER="X-Team-Region"
    )
    assert (run.project, run.region) == ("acme-prod", "europe-west1")


def test_fractional_seconds_beyond_microseconds_are_truncated():
    parsed = parse_schedule_time("2026-10-16T12:00:00.123456789Z")
    assert parsed == datetime(2026, 10, 16, 12, 0, 0, 123456, tzinfo=UTC)
