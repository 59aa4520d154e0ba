"""runledger.testing.JobHarness gives a job what production gives it, on Firestore and in memory.

These are the three answers a team wants about its own job: delivered twice,
it ran once; failed retryably, the retry resumed after the last checkpoint;
failed terminally, it never runs again.
"""

from __future__ import annotations

from datetime import timedelta

from runledger import Jobs, RunContext, TerminalJobError
from runledger.ledger.record import Status
from runledger.testing import DEFAULT_SCHEDULE_TIME, JobHarness


def _staged_jobs(calls: list[str], failures: list[str]) -> Jobs:
    """One job of two stages; `failures` lists the stage bodies that raise once each."""
    jobs = Jobs()

    def step(name: str) -> str:
        calls.append(name)
        if name in failures:
            failures.remove(name)
            raise RuntimeError(f"{name}: downstream unavailable")
        return f"{name} done"

    @jobs.job("staged")
    def staged(ctx: RunContext) -> None:
        ctx.stage("fetch", lambda: step("fetch"))
        ctx.stage("apply", lambda: step("apply"))

    @jobs.job("refuses")
    def refuses(ctx: RunContext) -> None:
        calls.append("refuses")
        raise TerminalJobError("bad input")

    return jobs


def test_delivered_twice_runs_once(store):
    calls: list[str] = []
    harness = JobHarness(_staged_jobs(calls, []), store=store)
    first = harness.deliver("staged")
    again = harness.deliver("staged")
    assert (first.status, first.outcome, first.ran) == (200, "completed", True)
    assert (again.status, again.outcome, again.ran) == (200, "duplicate_completed", False)
    assert calls == ["fetch", "apply"]
    assert first.record is not None and first.record.status is Status.COMPLETED


def test_failed_retryably_resumes_after_the_last_checkpoint(store):
    calls: list[str] = []
    harness = JobHarness(_staged_jobs(calls, ["apply"]), store=store)
    failed = harness.deliver("staged")
    assert (failed.status, failed.outcome) == (500, "failed_retryable")
    assert failed.record is not None and failed.record.status is Status.RELEASED
    retry = harness.deliver("staged")
    assert (retry.status, retry.outcome, retry.ran) == (200, "completed", True)
    # "fetch" was checkpointed by the first attempt: the retry starts at "apply".
    assert calls == ["fetch", "apply", "apply"]
    assert harness.executions("staged") == 2


def test_terminal_failure_never_runs_again(store):
    calls: list[str] = []
    harness = JobHarness(_staged_jobs(calls, []), store=store)
    first = harness.deliver("refuses")
    assert (first.status, first.outcome) == (422, "failed_terminal")
    assert first.record is not None and first.record.error == "TerminalJobError: bad input"
    harness.advance(hours=1)
    again = harness.deliver("refuses")
    assert (again.status, again.outcome, again.ran) == (422, "duplicate_failed", False)
    assert calls == ["refuses"]


def test_each_schedule_time_is_its_own_run(store):
    calls: list[str] = []
    harness = JobHarness(_staged_jobs(calls, []), store=store)
    harness.deliver("staged")
    harness.advance(hours=1)
    later = harness.deliver("staged", schedule_time=DEFAULT_SCHEDULE_TIME + timedelta(hours=1))
    assert (later.outcome, later.ran) == ("completed", True)
    assert later.record is not None and not later.record.manual
    assert harness.executions("staged") == 2


def test_unknown_job_is_refused_before_the_ledger(store):
    harness = JobHarness(_staged_jobs([], []), store=store)
    refused = harness.deliver("not-registered")
    assert (refused.status, refused.ran, refused.record) == (404, False, None)
