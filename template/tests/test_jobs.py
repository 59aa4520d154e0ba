"""Tests of handler/jobs.py: edit them alongside your jobs (`make test-jobs`).

`runledger.testing.JobHarness` runs a job through the real handler logic and run
ledger, in memory, the way Cloud Scheduler's retries and duplicate deliveries
reach it in production.
"""

from __future__ import annotations

from jobs import JOBS

from runledger.testing import JobHarness


def test_every_job_completes_on_its_first_delivery():
    harness = JobHarness(JOBS)
    for job in JOBS:
        delivery = harness.deliver(job)
        assert (delivery.status, delivery.outcome, delivery.ran) == (200, "completed", True), job


def test_nightly_report_delivered_twice_runs_once():
    harness = JobHarness(JOBS)
    first = harness.deliver("nightly-report")
    again = harness.deliver("nightly-report")
    assert (first.outcome, first.ran) == ("completed", True)
    assert (again.status, again.outcome, again.ran) == (200, "duplicate_completed", False)
    assert harness.executions("nightly-report") == 1
