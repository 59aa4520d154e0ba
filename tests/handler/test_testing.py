"""runledger.testing.JobHarness gives a job what production gives it, on Firestore and in memory.

These are the three answers a team wants about its own job: delivered twice,
it ran once; failed retryably, the retry resumed after the last checkpoint;
failed terminally, it never runs again.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
from datetime import UTC, datetime, timedelta

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


def _scheduled(**entry: object) -> dict[str, str]:
    """The env of a stack whose one job `report` runs hourly, with `entry`'s keys on top."""
    base = {"id": "report", "schedule": "30 * * * *", "timeZone": "UTC"}
    return {"DEDUP_SCHEDULES": json.dumps([base | {"retryWindowSeconds": 200} | entry])}


def test_the_harness_applies_the_jobs_overlap_policy_from_dedup_schedules(firestore_store):
    """As the handler does: the next time of a `skip` job is skipped while a run works."""
    inside, release = threading.Event(), threading.Event()
    jobs = Jobs()

    @jobs.job("report")
    def report(ctx: RunContext) -> None:
        if ctx.schedule_time == DEFAULT_SCHEDULE_TIME:
            inside.set()
            assert release.wait(30), "the test never released the held run"

    later = DEFAULT_SCHEDULE_TIME + timedelta(hours=1)
    harness = JobHarness(
        jobs,
        store=firestore_store,
        env=_scheduled(overlap="skip"),
        now=later + timedelta(seconds=1),
    )
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(harness.deliver, "report")
        assert inside.wait(30)
        second = harness.deliver("report", schedule_time=later)
        release.set()
        assert first.result(30).outcome == "completed"
    assert (second.status, second.outcome, second.ran) == (200, "overlap_skipped", False)
    assert second.record.status is Status.SKIPPED


def test_the_harness_keys_a_repeated_wall_time_in_the_jobs_zone_as_one_run(store):
    """02:30 in Berlin happens twice on 25 October 2026 (CEST, then CET): one run, as deployed."""
    jobs = Jobs()
    jobs.job("report")(lambda ctx: None)
    first_instant = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)  # 02:30 CEST
    harness = JobHarness(
        jobs,
        store=store,
        env=_scheduled(schedule="30 2 * * *", timeZone="Europe/Berlin"),
        now=first_instant + timedelta(hours=1, minutes=1),
    )
    first = harness.deliver("report", schedule_time=first_instant)
    again = harness.deliver("report", schedule_time=first_instant + timedelta(hours=1))  # CET
    assert (first.outcome, again.outcome) == ("completed", "duplicate_completed")
    assert harness.executions("report") == 1
