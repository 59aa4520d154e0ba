"""Tests of the jobs in handler/jobs.py: edit this file alongside your jobs.

Each test runs a job through the real handler logic and run ledger with
`runledger.testing.JobHarness` (in memory; its docstring says how to run the
same test on the Firestore emulator), the way Cloud Scheduler's retries and
duplicate deliveries reach it in production. The machinery's own tests never
import these jobs, so replacing them keeps `make test` green once this file
tests your jobs instead. A team's copy starts with this file and these jobs.
"""

from __future__ import annotations

from datetime import UTC, datetime

from jobs import JOBS

from runledger.testing import JobHarness


def test_every_job_completes_on_its_first_delivery():
    harness = JobHarness(JOBS)
    for job in JOBS:
        delivery = harness.deliver(job, body="{}")
        assert (delivery.status, delivery.outcome, delivery.ran) == (200, "completed", True), job


def test_nightly_report_delivered_twice_runs_once():
    harness = JobHarness(JOBS)
    first = harness.deliver("nightly-report")
    again = harness.deliver("nightly-report")
    assert (first.outcome, first.ran) == ("completed", True)
    assert (again.status, again.outcome, again.ran) == (200, "duplicate_completed", False)
    assert harness.executions("nightly-report") == 1


def test_hourly_sync_at_its_own_time_is_a_scheduled_run_and_forced_runs_are_separate():
    # Each delivery is judged at its schedule time (`JobHarness(JOBS, now=...)` pins
    # the clock instead); a forced run only when the test asks for one.
    harness = JobHarness(JOBS)
    at = datetime(2026, 12, 3, 14, 5, tzinfo=UTC)
    scheduled = harness.deliver("hourly-sync", schedule_time=at)
    forced = harness.deliver("hourly-sync", schedule_time=at, forced=True)
    assert (scheduled.outcome, scheduled.record.manual) == ("completed", False)
    assert (forced.outcome, forced.record.manual) == ("completed", True)
    assert harness.executions("hourly-sync") == 2


def test_invoice_export_with_a_bad_body_fails_for_good_and_never_runs_again():
    harness = JobHarness(JOBS)
    first = harness.deliver("invoice-export", body="not json")
    assert (first.status, first.outcome) == (422, "failed_terminal")
    assert first.record is not None and "not JSON" in (first.record.error or "")
    retry = harness.deliver("invoice-export", body="not json")
    assert (retry.status, retry.outcome, retry.ran) == (422, "duplicate_failed", False)
