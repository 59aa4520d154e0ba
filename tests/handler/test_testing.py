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
from pathlib import Path

from runledger import Jobs, RunContext, TerminalJobError
from runledger.ledger.record import Status
from runledger.testing import DEFAULT_SCHEDULE_TIME, JobHarness

REPO_ROOT = Path(__file__).resolve().parents[2]


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


def test_a_delivery_is_judged_at_its_own_schedule_time(store):
    """A realistic time is a scheduled run, whenever the test's times lie."""
    calls: list[str] = []
    harness = JobHarness(_staged_jobs(calls, []), store=store)
    december = datetime(2026, 12, 3, 12, 15, tzinfo=UTC)
    first = harness.deliver("staged", schedule_time=december)
    assert (first.status, first.outcome, first.ran) == (200, "completed", True)
    assert first.record is not None and not first.record.manual
    assert first.record.schedule_time == december
    assert harness.record("staged", december) == first.record
    # An earlier time after it is its own scheduled run too, not one past retention.
    earlier = harness.deliver("staged", schedule_time=december - timedelta(days=300))
    assert (earlier.outcome, earlier.record.manual) == ("completed", False)
    again = harness.deliver("staged", schedule_time=december)
    assert (again.outcome, again.ran) == ("duplicate_completed", False)


def test_a_forced_run_only_when_the_test_asks_for_one(store):
    calls: list[str] = []
    harness = JobHarness(_staged_jobs(calls, []), store=store)
    at = datetime(2026, 12, 3, 12, 15, tzinfo=UTC)
    scheduled = harness.deliver("staged", schedule_time=at)
    forced = harness.deliver("staged", schedule_time=at, forced=True)
    assert (scheduled.outcome, forced.outcome) == ("completed", "completed")
    assert forced.record is not None and forced.record.manual
    assert not scheduled.record.manual
    assert harness.executions("staged") == 2


def test_a_pinned_clock_judges_a_later_stamp_as_a_forced_run(store):
    """Pinned, the handler's own rule: stamped ahead of now is Scheduler's forced run."""
    harness = JobHarness(_staged_jobs([], []), store=store, now=DEFAULT_SCHEDULE_TIME)
    ahead = harness.deliver("staged", schedule_time=DEFAULT_SCHEDULE_TIME + timedelta(hours=1))
    assert ahead.outcome == "completed" and ahead.record.manual
    on_time = harness.deliver("staged")
    assert on_time.outcome == "completed" and not on_time.record.manual


def test_advance_moves_every_later_delivery_on(store):
    """A run released by a retryable failure, retried an hour later: the clock says so."""
    seen: list[datetime] = []
    jobs = Jobs()

    @jobs.job("flaky")
    def flaky(ctx: RunContext) -> None:
        seen.append(ctx.schedule_time)
        if len(seen) == 1:
            raise RuntimeError("downstream unavailable")

    harness = JobHarness(jobs, store=store)
    at = datetime(2026, 12, 3, 12, 15, tzinfo=UTC)
    assert harness.deliver("flaky", schedule_time=at).outcome == "failed_retryable"
    harness.advance(hours=1)
    assert harness.clock.at(at) == at + timedelta(hours=1, seconds=1)
    retry = harness.deliver("flaky", schedule_time=at)
    assert (retry.outcome, retry.record.attempts) == ("completed", 2)
    assert harness.clock() == at + timedelta(hours=1, seconds=1)


def _table_rows(doc: str, heading: str) -> list[list[str]]:
    """The body rows of the first table under `heading` in `doc`, cells without backticks."""
    text = (REPO_ROOT / doc).read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    rows = []
    for line in section.splitlines()[1:]:
        if line.startswith("## "):
            break
        if line.startswith("| ") and not line.startswith("| ---"):
            rows.append([cell.strip().replace("`", "") for cell in line.strip("|").split("|")])
        elif rows and not line.startswith("|"):
            break
    return rows[1:]  # without the header row


def test_the_outcomes_a_test_sees_are_the_names_the_docs_use(store):
    """One vocabulary: what the harness returns is docs/work.md's table, reference.md's names."""
    calls: list[str] = []
    harness = JobHarness(_staged_jobs(calls, ["apply"]), store=store)
    seen = []
    for job in ("staged", "staged", "staged", "refuses", "refuses", "not-registered"):
        delivery = harness.deliver(job)
        status = delivery.record.status.value if delivery.record else "(no record)"
        seen.append((str(delivery.status), delivery.outcome, status))
    table = _table_rows("docs/work.md", "## Test a job")
    documented = {(row[1], row[2].split(" ")[0], row[3]) for row in table}
    assert set(seen) == documented
    reference = {
        row[0].split(" ")[0]: row[1] for row in _table_rows("docs/reference.md", "## Outcomes")
    }
    for status, outcome, _ in seen:
        assert status in reference[outcome], outcome
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    for outcome in ("completed", "failed_terminal", "failed_retryable"):
        assert f" {outcome}" in readme.split("## Start your team's repository")[0], outcome
