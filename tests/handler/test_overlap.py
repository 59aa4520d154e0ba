"""The overlap policy through `App.handle` on the emulator: allow, skip, delay, races, dead holders.

Two scheduled times of one job overlap when the second is delivered while the
first still runs. Each test holds the first run inside its job on an event, so
the overlap is certain, and checks what Scheduler is answered, what the ledger
records and how often the job ran.
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from runledger.audit.report import log_report
from runledger.audit.runner import Audit
from runledger.delivery.identify import run_key
from runledger.exceptions import StoreUnavailable
from runledger.ledger.firestore_store import AUDIT_COLLECTION, FirestoreRunStore
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.record import Status
from runledger.ops.cli import EXIT_OK, main
from runledger.schedules import AuditSettings, JobSchedule
from runledger.service.app import App
from tests.handler.support import (
    LEASE,
    T0,
    DrivenRenewals,
    FakeClock,
    deliver,
    scheduler_headers,
    sequential_ids,
    settings,
)

JOB = "report"
FIRST, SECOND = "2026-10-16T12:00:00Z", "2026-10-16T12:05:00Z"
# After every time the tests deliver, so none is taken for a forced run.
NOW = T0 + timedelta(minutes=11)


def key(schedule_time: str | datetime) -> str:
    when = (
        schedule_time
        if isinstance(schedule_time, datetime)
        else datetime.fromisoformat(schedule_time.replace("Z", "+00:00"))
    )
    return run_key(JOB, when, "acme-prod", "europe-west1", manual=False)


class HeldJob:
    """A job whose run of FIRST waits inside the job until `release()`; others return at once."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self._release = threading.Event()
        self.ran: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, ctx) -> None:
        with self._lock:
            self.ran.append(ctx.schedule_time.isoformat())
        if ctx.schedule_time == T0:
            self.inside.set()
            assert self._release.wait(120), "the test never released the held run"

    def release(self) -> None:
        self._release.set()


def app_with(
    store: FirestoreRunStore,
    policy: str,
    job: Callable,
    clock: Callable[[], datetime] | None = None,
    renewals: DrivenRenewals | None = None,
) -> App:
    return App(
        settings(),
        {JOB: job},
        lambda: store,
        clock=clock or FakeClock(NOW),
        new_attempt_id=sequential_ids(),
        renewals=renewals or DrivenRenewals(),
        overlaps={JOB: policy},
    )


def hold_first(app: App, job: HeldJob) -> tuple[threading.Thread, dict]:
    answers: dict = {}
    thread = threading.Thread(
        target=lambda: answers.setdefault("first", deliver(app, scheduler_headers(JOB, FIRST)))
    )
    thread.start()
    assert job.inside.wait(120)
    return thread, answers


def test_allow_runs_the_second_time_beside_the_first(firestore_store):
    job = HeldJob()
    app = app_with(firestore_store, "allow", job)
    thread, answers = hold_first(app, job)
    second = deliver(app, scheduler_headers(JOB, SECOND))
    job.release()
    thread.join(120)
    assert (second.status, second.outcome) == (200, "completed")
    assert (answers["first"].status, answers["first"].outcome) == (200, "completed")
    assert len(job.ran) == 2


def test_skip_records_the_second_time_skipped_and_never_runs_it(firestore_store):
    job = HeldJob()
    app = app_with(firestore_store, "skip", job)
    thread, answers = hold_first(app, job)
    second = deliver(app, scheduler_headers(JOB, SECOND))
    assert (second.status, second.outcome) == (200, "overlap_skipped")
    assert "in progress" in second.message
    record = app.ledger.read(key(SECOND))
    assert record is not None
    assert (record.status, record.yielded_to) == (Status.SKIPPED, key(FIRST))
    assert record.expire_at == record.schedule_time + app.settings.retention
    job.release()
    thread.join(120)
    assert answers["first"].outcome == "completed"
    # Scheduler's retry of the skipped time, after the first finished: still not run.
    again = deliver(app, scheduler_headers(JOB, SECOND))
    assert (again.status, again.outcome) == (200, "duplicate_skipped")
    assert job.ran == [T0.isoformat()]
    # With the first done, the next time runs.
    third = deliver(app, scheduler_headers(JOB, "2026-10-16T12:10:00Z"))
    assert (third.status, third.outcome) == (200, "completed")
    assert len(job.ran) == 2


def test_delay_answers_retryably_and_the_retry_runs_after_the_first(firestore_store):
    job = HeldJob()
    app = app_with(firestore_store, "delay", job)
    thread, _ = hold_first(app, job)
    second = deliver(app, scheduler_headers(JOB, SECOND))
    assert (second.status, second.outcome) == (409, "overlap_delayed")
    assert app.ledger.read(key(SECOND)) is None  # nothing written: an ordinary retry claims it
    job.release()
    thread.join(120)
    retry = deliver(app, scheduler_headers(JOB, SECOND))
    assert (retry.status, retry.outcome) == (200, "completed")
    assert sorted(job.ran) == sorted([T0.isoformat(), (T0 + timedelta(minutes=5)).isoformat()])


def test_a_duplicate_of_the_running_time_is_its_duplicate_not_a_skip(firestore_store):
    job = HeldJob()
    app = app_with(firestore_store, "skip", job)
    thread, _ = hold_first(app, job)
    copy = deliver(app, scheduler_headers(JOB, FIRST))
    job.release()
    thread.join(120)
    assert (copy.status, copy.outcome) == (409, "duplicate_in_progress")
    assert app.ledger.read(key(FIRST)).status is Status.COMPLETED


def test_skip_after_a_dead_holder_runs_and_fences_the_holder_out(firestore_store):
    """A holder whose lease ran out no longer counts as running (the takeover rule)."""
    clock = FakeClock(NOW)
    job = HeldJob()
    app = app_with(firestore_store, "skip", job, clock)
    thread, answers = hold_first(app, job)  # renewals never run: as if the holder died
    clock.advance(seconds=(LEASE + MAX_CLOCK_SKEW).total_seconds())
    second = deliver(app, scheduler_headers(JOB, SECOND))
    assert (second.status, second.outcome) == (200, "completed")
    first = app.ledger.read(key(FIRST))
    assert first.status is Status.IN_PROGRESS
    assert first.lease_expires <= clock()  # its lease was ended by the takeover's commit
    job.release()  # the holder was only cut off: its final write must fail, not complete
    thread.join(120)
    assert (answers["first"].status, answers["first"].outcome) == (409, "lease_lost")
    assert app.ledger.read(key(SECOND)).status is Status.COMPLETED


def test_a_late_retry_of_a_dead_holder_yields_to_the_run_that_took_over(firestore_store):
    clock = FakeClock(NOW)
    job = HeldJob()
    app = app_with(firestore_store, "skip", job, clock)
    thread, _ = hold_first(app, job)
    clock.advance(seconds=(LEASE + MAX_CLOCK_SKEW).total_seconds())
    blocker = threading.Event()
    app.jobs = {JOB: lambda ctx: (job(ctx), blocker.wait(120))}
    second_answer: dict = {}
    second = threading.Thread(
        target=lambda: second_answer.setdefault("r", deliver(app, scheduler_headers(JOB, SECOND)))
    )
    second.start()
    deadline = time.monotonic() + 120
    while len(job.ran) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    # Once the ended lease is past the skew margin too, Scheduler's retry of the first time:
    clock.advance(seconds=MAX_CLOCK_SKEW.total_seconds())
    retry = deliver(app, scheduler_headers(JOB, FIRST))
    blocker.set()
    job.release()
    second.join(120)
    thread.join(120)
    assert (retry.status, retry.outcome) == (200, "overlap_skipped")
    record = app.ledger.read(key(FIRST))
    assert (record.status, record.yielded_to, record.attempts) == (
        Status.SKIPPED,
        key(SECOND),
        2,
    )
    assert second_answer["r"].outcome == "completed"


@pytest.mark.parametrize("round_", range(4))
def test_concurrent_deliveries_of_two_times_never_both_skip_nor_overlap(firestore_db, round_):
    """Many copies of two consecutive times at once, each holding the job for a while."""
    store = FirestoreRunStore(firestore_db, f"race_{round_}")
    spans: list[tuple[str, float, float]] = []
    lock = threading.Lock()

    def slow(ctx) -> None:
        began = time.monotonic()
        time.sleep(0.3)
        with lock:
            spans.append((ctx.schedule_time.isoformat(), began, time.monotonic()))

    app = App(
        settings(),
        {JOB: slow},
        lambda: store,
        overlaps={JOB: "skip"},
    )
    # Two consecutive 5-minute times shortly before now: inside the retention, not forced.
    base = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)
    times = [
        (base + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ") for minutes in (0, 5)
    ]
    barrier = threading.Barrier(12)
    answers: list = []

    def one(schedule_time: str) -> None:
        barrier.wait(120)
        answers.append((schedule_time, deliver(app, scheduler_headers(JOB, schedule_time))))

    threads = [threading.Thread(target=one, args=(times[i % 2],)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(answers) == 12
    records = {t: app.ledger.read(key(t)) for t in times}
    statuses = sorted(record.status.value for record in records.values())
    assert statuses in (["completed", "skipped"], ["completed", "completed"])
    ran = [span[0] for span in spans]
    assert len(ran) == len(set(ran)) == statuses.count("completed")  # each time at most once
    if len(spans) == 2:  # both ran: only one after the other
        first, second = sorted(spans, key=lambda span: span[1])
        assert first[2] <= second[1]
    for record in records.values():
        if record.status is Status.SKIPPED:
            assert record.yielded_to in {key(t) for t in times} - {key(record.schedule_time)}
    for _, answer in answers:
        assert answer.status in (200, 409), answer


def test_the_audit_counts_a_skip_as_deliberately_not_run(firestore_store):
    job = HeldJob()
    clock = FakeClock(NOW)
    app = app_with(firestore_store, "skip", job, clock)
    thread, _ = hold_first(app, job)
    assert deliver(app, scheduler_headers(JOB, SECOND)).outcome == "overlap_skipped"
    job.release()
    thread.join(120)
    schedule = JobSchedule(
        JOB,
        "*/5 * * * *",
        "UTC",
        timedelta(minutes=3),
        timedelta(minutes=3),
        False,
        timedelta(hours=1),
        overlap="skip",
    )
    audit = Audit(
        AuditSettings((schedule,), timedelta(minutes=41), "acme-prod", "europe-west1"),
        lease=app.settings.lease,
        read=app.ledger.read_many,
        clock=lambda: T0 + timedelta(minutes=40),
        epochs=lambda schedules, now: {JOB: T0},
    )
    report = audit.run()
    out = io.StringIO()
    log_report(report, out)
    summary = json.loads(out.getvalue().splitlines()[-1])
    # 12:00 completed and 12:05 skipped: neither is a finding; later times were never delivered.
    found = {item.schedule_time: item.finding.value for item in report.findings}
    assert T0 not in found and T0 + timedelta(minutes=5) not in found
    assert set(found.values()) == {"missed"} and found
    assert (summary["skipped"], summary["missed"], summary["failed"]) == (1, len(found), 0)
    assert "1 run(s) skipped by their overlap policy" in summary["message"]


def test_ops_list_status_skipped_shows_the_skipped_run_and_whom_it_yielded_to(firestore_store):
    job = HeldJob()
    app = app_with(firestore_store, "skip", job)
    thread, _ = hold_first(app, job)
    assert deliver(app, scheduler_headers(JOB, SECOND)).outcome == "overlap_skipped"
    job.release()
    thread.join(120)

    def ops(*argv: str) -> tuple[int, str]:
        out = io.StringIO()
        code = main(
            [*argv, "--project", "demo-dedup"],
            env=dict(os.environ),
            clock=lambda: NOW,
            stdin=io.StringIO(""),
            stdout=out,
            stderr=io.StringIO(),
        )
        return code, out.getvalue()

    code, out = ops("list", "--status", "skipped", "--json")
    assert code == EXIT_OK
    (row,) = json.loads(out)
    assert (row["key"], row["status"], row["yielded_to"]) == (key(SECOND), "skipped", key(FIRST))
    code, out = ops("list", "--status", "skipped")
    assert f"yielded to run {key(FIRST)[:16]}" in out


def test_describe_counts_a_skip_and_a_backfill_leaves_it_alone(firestore_store):
    job = HeldJob()
    app = app_with(firestore_store, "skip", job)
    thread, _ = hold_first(app, job)
    assert deliver(app, scheduler_headers(JOB, SECOND)).outcome == "overlap_skipped"
    job.release()
    thread.join(120)
    schedules = [
        {
            "id": JOB,
            "schedule": "*/5 * * * *",
            "timeZone": "UTC",
            "retryWindowSeconds": 200,
            "overlap": "skip",
        }
    ]
    env = dict(os.environ) | {
        "DEDUP_SCHEDULES": json.dumps(schedules),
        "DEDUP_ALLOWED_PROJECTS": "acme-prod",
        "DEDUP_ALLOWED_REGIONS": "europe-west1",
        "DEDUP_LEASE_SECONDS": str(int(LEASE.total_seconds())),
    }

    def ops(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = main(list(argv), env=env, clock=lambda: NOW, stdout=out, stderr=err)
        return code, out.getvalue(), err.getvalue()

    code, out, err = ops("describe", "--job", JOB, "--json")
    assert (code, err) == (EXIT_OK, "")
    view = json.loads(out)
    assert view["overlap"] == "skip"
    statuses = {item["schedule_time"]: item["status"] for item in view["recent"]}
    assert (statuses[FIRST], statuses[SECOND]) == ("completed", "skipped")
    assert (view["counts"]["completed"], view["counts"]["skipped"]) == (1, 1)
    # A skipped time was deliberately not run: a backfill over it runs nothing.
    window = ["--job", JOB, "--from", FIRST, "--to", "2026-10-16T12:10:00Z"]
    code, out, err = ops("backfill", *window, "--dry-run", "--json")
    assert (code, err, json.loads(out)) == (EXIT_OK, "", [])
    code, out, _ = ops("backfill", *window, "--dry-run")
    assert "left alone: 1 skipped (overlap: skip)" in out
    assert "left alone: 1 completed" in out


def test_deleting_the_audit_documents_never_fences_out_the_running_holder(
    firestore_db, firestore_store
):
    """The slot is the audit's document (runledger_audit): gone, it reads free, and the
    holder's next fenced write puts it back in the same commit instead of failing."""
    clock, renewals, job = FakeClock(NOW), DrivenRenewals(), HeldJob()
    app = app_with(firestore_store, "skip", job, clock, renewals)
    thread, answers = hold_first(app, job)
    firestore_db.recursive_delete(firestore_db.collection(AUDIT_COLLECTION))
    clock.advance(seconds=10)
    assert renewals.run_due() == 1
    assert app.ledger.read(key(FIRST)).lease_expires == clock() + app.ledger.claim_lease
    # The renewal re-created the slot: the holder still counts as running.
    second = deliver(app, scheduler_headers(JOB, SECOND))
    assert (second.status, second.outcome) == (200, "overlap_skipped")
    job.release()
    thread.join(30)
    assert (answers["first"].status, answers["first"].outcome) == (200, "completed")
    assert app.ledger.read(key(FIRST)).status is Status.COMPLETED
    assert job.ran == [T0.isoformat()]


class LostClaimAnswer(FirestoreRunStore):
    """The first slotted claim commits, then its answer is lost (a dropped connection)."""

    lost = False

    def claim_slotted(self, *request):
        version = super().claim_slotted(*request)
        if not self.lost:
            self.lost = True
            raise StoreUnavailable("Firestore unavailable: DeadlineExceeded")
        return version


def test_a_claim_given_up_after_its_answer_was_lost_frees_the_jobs_slot(firestore_db):
    clock, job = FakeClock(NOW), HeldJob()
    job.release()
    app = app_with(LostClaimAnswer(firestore_db, "scheduler_runs"), "skip", job, clock)
    first = deliver(app, scheduler_headers(JOB, FIRST))
    assert (first.status, first.outcome) == (503, "store_unavailable")
    assert "was given up" in first.message
    clock.advance(seconds=MAX_CLOCK_SKEW.total_seconds() + 1)
    # Nothing runs: the job's next time runs rather than being skipped for a ghost.
    second = deliver(app, scheduler_headers(JOB, SECOND))
    assert (second.status, second.outcome) == (200, "completed")
    clock.advance(seconds=MAX_CLOCK_SKEW.total_seconds() + 1)  # past the ended lease's margin
    retry = deliver(app, scheduler_headers(JOB, FIRST))
    assert (retry.status, retry.outcome) == (200, "completed")
    assert sorted(job.ran) == [T0.isoformat(), (T0 + timedelta(minutes=5)).isoformat()]
