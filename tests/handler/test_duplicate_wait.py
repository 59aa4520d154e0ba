"""An in-progress duplicate waits for the holder's outcome and answers with it, on the emulator.

The wait runs on its own clock: `ScriptedTimer` stands in for it, so a test
decides what happens at each poll (the holder finishes, fails, goes on)
without sleeping, while the ledger keeps the test's `FakeClock`. One test
waits for real, with a short cap, to show the answer comes before the budget.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest

from runledger.delivery.app import App, Response, configured_wait
from runledger.delivery.duplicate_wait import MIN_MARGIN_S, DuplicateWait, wait_budget
from runledger.delivery.identify import identify_run
from runledger.exceptions import ConfigError, TerminalJobError
from runledger.ledger.record import Status
from runledger.schedules import audit_settings
from tests.handler.support import (
    LEASE,
    DrivenRenewals,
    FakeClock,
    deliver,
    run_record,
    scheduler_headers,
    sequential_ids,
    settings,
)
from tests.stacks import HANDLER_DIR

JOB = "wait-demo-job"
HEADERS = scheduler_headers(job=JOB)


class ScriptedTimer:
    """The wait's monotonic clock and sleep: a sleep moves the clock and runs the next step."""

    def __init__(self, steps: list[Callable[[], None]] | None = None) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self._steps = list(steps or [])

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self._steps:
            self._steps.pop(0)()


class Holder:
    """A job whose first execution runs until the test ends it, by returning or raising."""

    def __init__(self) -> None:
        self.inside, self.go = threading.Event(), threading.Event()
        self.runs = 0
        self.fail_with: BaseException | None = None
        self.answer: Response | None = None
        self._thread: threading.Thread | None = None

    def __call__(self, ctx: object) -> None:
        self.runs += 1
        if self.runs == 1:
            self.inside.set()
            assert self.go.wait(60)
            if self.fail_with is not None:
                raise self.fail_with

    def start(self, app: App) -> None:
        """Deliver the run on a thread; return once the job is running."""

        def first() -> None:
            self.answer = deliver(app, HEADERS)

        self._thread = threading.Thread(target=first)
        self._thread.start()
        assert self.inside.wait(60)

    def finish(self) -> None:
        """Let the job end and wait until its outcome is recorded."""
        assert self._thread is not None
        self.go.set()
        self._thread.join(60)
        assert not self._thread.is_alive()


def _app(store: object, job: Holder, clock: FakeClock, timer: ScriptedTimer, **env: str) -> App:
    """An app whose job has Scheduler's default deadline, 180 s, unless `env` sets another."""
    env = {**_schedules(180), **env}
    app_settings = settings(**env)
    wait = configured_wait(app_settings, audit_settings(env, app_settings))
    assert wait is not None
    return App(
        app_settings,
        {JOB: job},
        lambda: store,
        clock=clock,
        new_attempt_id=sequential_ids(),
        renewals=DrivenRenewals(),
        duplicate_wait=DuplicateWait(
            wait.deadlines, wait.lease, wait.cap, timer.monotonic, timer.sleep
        ),
    )


def _key(app: App) -> str:
    return identify_run(HEADERS, app.settings, app.jobs, app.ledger.now()).key


def _schedules(deadline_s: int) -> dict[str, str]:
    entry = {
        "id": JOB,
        "schedule": "0 12 * * *",
        "timeZone": "UTC",
        "retryWindowSeconds": 600,
        "attemptDeadlineSeconds": deadline_s,
    }
    return {
        "DEDUP_SCHEDULES": json.dumps([entry]),
        "DEDUP_ALLOWED_PROJECTS": "acme-prod",
        "DEDUP_ALLOWED_REGIONS": "europe-west1",
    }


def test_duplicate_gets_200_once_the_holder_completes_and_the_work_ran_once(
    firestore_store, rpc_counter, capsys
):
    job, clock = Holder(), FakeClock()
    timer = ScriptedTimer([lambda: None, job.finish])
    app = _app(firestore_store, job, clock, timer)
    job.start(app)
    rpc_counter.reset()
    duplicate = deliver(app, HEADERS)
    assert (duplicate.status, duplicate.outcome) == (200, "duplicate_waited_completed")
    assert "attempt-1" in duplicate.message
    assert job.answer is not None and job.answer.status == 200
    assert job.runs == 1
    # Polls after 0.5 s and 1 s; the second one sees the outcome.
    assert timer.sleeps == [0.5, 1.0]
    # The duplicate: its create, the claim's read, one read per poll. The holder: its completion.
    reads = rpc_counter.calls["batch_get_documents"] + rpc_counter.calls["get_document"]
    assert (reads, rpc_counter.total) == (1 + 2, 1 + 1 + 2 + 1), rpc_counter.calls
    assert firestore_store.get(_key(app)).record.status is Status.COMPLETED
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    logged = next(line for line in lines if line["outcome"] == "duplicate_waited_completed")
    assert (logged["waited_s"], logged["wait_polls"]) == (1.5, 2)


def test_duplicate_answers_non_2xx_when_the_holder_fails_retryably_and_a_retry_runs_it(
    firestore_store,
):
    job, clock = Holder(), FakeClock()
    job.fail_with = TimeoutError("upstream timed out")
    app = _app(firestore_store, job, clock, ScriptedTimer([job.finish]))
    job.start(app)
    duplicate = deliver(app, HEADERS)
    assert (duplicate.status, duplicate.outcome) == (500, "duplicate_waited_released")
    assert "upstream timed out" in duplicate.message
    assert job.answer is not None and job.answer.outcome == "failed_retryable"
    retry = deliver(app, HEADERS)
    assert (retry.status, retry.outcome) == (200, "completed")
    assert job.runs == 2


def test_duplicate_answers_422_when_the_holder_fails_for_good(firestore_store):
    job, clock = Holder(), FakeClock()
    job.fail_with = TerminalJobError("account closed")
    app = _app(firestore_store, job, clock, ScriptedTimer([job.finish]))
    job.start(app)
    duplicate = deliver(app, HEADERS)
    assert (duplicate.status, duplicate.outcome) == (422, "duplicate_waited_failed")
    assert "account closed" in duplicate.message
    assert job.runs == 1


def test_wait_ends_with_409_inside_the_jobs_attempt_deadline(firestore_store, rpc_counter):
    """A 15 s deadline leaves 13 s: polls at 0.5, 1.5, 3.5, 7.5, 11.5 and the last at 13 s."""
    job, clock = Holder(), FakeClock()
    timer = ScriptedTimer()
    app = _app(firestore_store, job, clock, timer, **_schedules(15))
    job.start(app)
    rpc_counter.reset()
    started = time.monotonic()
    duplicate = deliver(app, HEADERS)
    # The claim's real round trips count against the budget; on a loaded machine
    # they take more than a few milliseconds, so the wait ends that much earlier.
    spent_s = time.monotonic() - started
    job.finish()
    assert (duplicate.status, duplicate.outcome) == (409, "duplicate_in_progress")
    assert timer.sleeps[:5] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert 13.0 - spent_s - 0.05 <= timer.now <= 13.0
    assert rpc_counter.calls["batch_get_documents"] + rpc_counter.calls["get_document"] == 1 + 6
    assert job.runs == 1


def test_wait_stops_when_the_holders_lease_runs_out_and_the_duplicate_takes_the_run_over(
    firestore_store,
):
    """The holder stopped renewing (it died, as far as the ledger can tell): the waiting
    duplicate claims the run with the same fenced claim, runs it and answers its outcome;
    the stalled holder, should it wake, can record nothing."""
    job, clock = Holder(), FakeClock()
    timer = ScriptedTimer([lambda: clock.advance(seconds=LEASE.total_seconds() + 3)])
    app = _app(firestore_store, job, clock, timer)
    job.start(app)
    duplicate = deliver(app, HEADERS)
    job.finish()
    assert (duplicate.status, duplicate.outcome) == (200, "completed")
    assert timer.sleeps == [0.5]
    assert job.runs == 2
    assert job.answer is not None and (job.answer.status, job.answer.outcome) == (
        409,
        "lease_lost",
    )
    record = firestore_store.get(_key(app)).record
    assert (record.status, record.attempts, record.attempt_id) == (
        Status.COMPLETED,
        2,
        "attempt-3",
    )


def test_real_wait_answers_409_before_its_cap(firestore_store):
    job, clock = Holder(), FakeClock()
    env = {**_schedules(180), "DEDUP_DUPLICATE_WAIT_SECONDS": "1.5"}
    app_settings = settings(**env)
    app = App(
        app_settings,
        {JOB: job},
        lambda: firestore_store,
        clock=clock,
        new_attempt_id=sequential_ids(),
        renewals=DrivenRenewals(),
        duplicate_wait=configured_wait(app_settings, audit_settings(env, app_settings)),
    )
    job.start(app)
    started = time.monotonic()
    duplicate = deliver(app, HEADERS)
    took = time.monotonic() - started
    job.finish()
    assert (duplicate.status, duplicate.outcome) == (409, "duplicate_in_progress")
    assert 1.0 <= took < 1.5 + 1.0  # the cap, plus generous room for a loaded machine


def test_without_a_wait_the_duplicate_is_answered_409_at_once(firestore_store):
    job, clock = Holder(), FakeClock()
    app_settings = settings(DEDUP_DUPLICATE_WAIT_SECONDS="0")
    assert configured_wait(app_settings, audit_settings({}, app_settings)) is None
    app = App(app_settings, {JOB: job}, lambda: firestore_store, clock=clock)
    job.start(app)
    duplicate = deliver(app, HEADERS)
    job.finish()
    assert (duplicate.status, duplicate.outcome) == (409, "duplicate_in_progress")


@pytest.mark.parametrize(
    ("deadline_s", "lease_s", "cap_s", "budget_s"),
    [
        (180, 360, None, 162.0),  # Scheduler's default deadline, 10 % margin
        (15, 360, None, 13.0),  # the shortest deadline: the 2 s floor of the margin
        (900, 360, None, 324.0),  # the lease bounds it: the holder's request is over by then
        (180, 360, 30, 30.0),  # DEDUP_DUPLICATE_WAIT_SECONDS caps it
        (180, 2, None, 0.0),  # a lease too short for any wait
    ],
)
def test_wait_budget(deadline_s, lease_s, cap_s, budget_s):
    cap = None if cap_s is None else timedelta(seconds=cap_s)
    budget = wait_budget(timedelta(seconds=deadline_s), timedelta(seconds=lease_s), cap)
    assert budget == pytest.approx(budget_s)


def test_a_job_without_a_schedule_entry_does_not_wait():
    # Its deadline is unknown (the audit's own job has none in DEDUP_SCHEDULES): an
    # answer after it would reach nobody, so its duplicates get 409 at once.
    wait = DuplicateWait({"other": timedelta(seconds=30)}, timedelta(seconds=360), None)
    assert wait.budget(JOB) == 0.0
    assert wait.budget("other") == pytest.approx(27.0)


def test_waiting_counts_what_the_claim_already_took():
    timer = ScriptedTimer()
    wait = DuplicateWait(
        {JOB: timedelta(seconds=180)}, timedelta(seconds=10), None, timer.monotonic, timer.sleep
    )
    clock = FakeClock()
    record = run_record(lease_expires=clock() + LEASE)
    waited = wait.wait(JOB, 5.0, record, lambda: record, clock)
    assert timer.now == pytest.approx(3.0)  # 10 s lease - 2 s margin - 5 s spent
    assert waited.polls == 3 and waited.record is record


@pytest.mark.parametrize("value", ["-1", "soon", "nan", "1801"])
def test_bad_wait_setting_names_the_variable(value):
    with pytest.raises(ConfigError, match="DEDUP_DUPLICATE_WAIT_SECONDS"):
        settings(DEDUP_DUPLICATE_WAIT_SECONDS=value)


def test_the_margins_floor_covers_the_cold_start_make_bench_measures():
    """The budget counts from the handler's start; a cold start comes before it.

    docs/benchmarks.md holds `make bench`'s latest figures: the slowest fresh
    handler process (spawn to exit) must fit in the 2 s floor with half a second
    left for the answer to travel.
    """
    text = (HANDLER_DIR.parent / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    row = re.search(r"\| whole process \(spawn to exit\) \| [\d.]+ \[[\d.]+-([\d.]+)\]", text)
    assert row is not None, "docs/benchmarks.md has no cold-start row"
    slowest_s = float(row.group(1)) / 1000
    assert slowest_s + 0.5 <= MIN_MARGIN_S
