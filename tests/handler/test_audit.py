"""The audit on the emulator: every finding kind, daylight-saving days, catch-up, the audit job."""

from __future__ import annotations

import json
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runledger.audit.expected import schedule_times
from runledger.audit.findings import Finding
from runledger.audit.runner import Audit
from runledger.delivery.app import App
from runledger.exceptions import ConfigError, TerminalJobError
from runledger.ledger.epochs import record_epochs
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.record import Status
from runledger.schedules import (
    AUDIT_JOB_ID,
    AuditSettings,
    audit_settings,
    check_jobs,
    parse_schedules,
)
from runledger.sdk.context import RunContext
from tests.handler import machinery_jobs
from tests.handler.support import (
    LEASE,
    RETENTION,
    T0,
    FakeClock,
    deliver,
    make_app,
    run_record,
    scheduler_headers,
    settings,
    start_main,
)
from tests.stacks import HANDLER_DIR

SCOPE = {"DEDUP_ALLOWED_PROJECTS": "acme-prod", "DEDUP_ALLOWED_REGIONS": "europe-west1"}
# The stack was deployed, and its first audit recorded each job's epoch, before
# every window these tests audit (the epoch itself is tested in test_audit_epoch).
DEPLOYED = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW = timedelta(seconds=200)
# A run settles once its retry window, the lease and the clock skew have passed.
SETTLE = WINDOW + LEASE + MAX_CLOCK_SKEW


def schedules(*entries: dict[str, Any]) -> str:
    defaults = {"timeZone": "UTC", "retryWindowSeconds": WINDOW.total_seconds()}
    return json.dumps([defaults | entry for entry in entries])


def stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def move_to(clock: FakeClock, when: datetime) -> None:
    clock.advance(seconds=(when - clock()).total_seconds())


def audit_app(store, jobs, clock: FakeClock, raw: str) -> tuple[App, AuditSettings]:
    config = audit_settings({"DEDUP_SCHEDULES": raw} | SCOPE, settings(**SCOPE))
    app = make_app(store, jobs, clock, audit=config, **SCOPE)
    record_epochs(store, config.project, config.region, config.schedules, DEPLOYED)
    return app, config


def audit_of(store, app: App, config: AuditSettings, catch_up: bool = False) -> Audit:
    return Audit(
        config,
        lease=app.settings.lease,
        read=app.ledger.read_many,
        clock=app.ledger.now,
        epochs=lambda jobs, now: record_epochs(store, config.project, config.region, jobs, now),
        catch_up=(lambda run: app.catch_up(run).outcome) if catch_up else None,
    )


def findings(report) -> list[tuple[str, str, str]]:
    return [(f.job, stamp(f.schedule_time), f.finding.value) for f in report.findings]


def outcome_job(ctx: RunContext) -> None:
    """Completes, fails for good or fails retryably, by the hour it was scheduled for."""
    if ctx.schedule_time.hour == 10:
        raise TerminalJobError("bad input")
    if ctx.schedule_time.hour == 11:
        raise ConnectionError("upstream reset")


def test_every_finding_kind_once_its_run_has_settled(firestore_store, capsys):
    clock = FakeClock(T0 - timedelta(hours=5, minutes=1))
    app, config = audit_app(
        firestore_store,
        {"etl": outcome_job},
        clock,
        schedules({"id": "etl", "schedule": "0 * * * *"}),
    )
    # A forced run stamped with the next scheduled time (07:00) is not that run.
    forced = deliver(
        app, scheduler_headers(job="etl", schedule_time=stamp(T0 - timedelta(hours=5)))
    )
    assert forced.outcome == "completed"
    for hour in (8, 10, 11):
        when = T0.replace(hour=hour)
        move_to(clock, when + timedelta(seconds=5))
        deliver(app, scheduler_headers(job="etl", schedule_time=stamp(when)))
    audit = audit_of(firestore_store, app, config)
    stale = audit.identity("etl", T0 - timedelta(hours=3))
    firestore_store.create(
        stale.key,
        run_record(
            "dead",
            job="etl",
            schedule_time=stale.schedule_time,
            lease_expires=stale.schedule_time + LEASE,
        ),
    )
    move_to(clock, T0 + timedelta(seconds=1))

    report = audit.run(timedelta(hours=6))

    assert findings(report) == [
        ("etl", "2026-10-16T07:00:00Z", "missed"),
        ("etl", "2026-10-16T09:00:00Z", "stale"),
        ("etl", "2026-10-16T10:00:00Z", "failed"),
        ("etl", "2026-10-16T11:00:00Z", "released"),
    ]
    # 12:00 is still inside its retry window: counted as pending, not reported.
    # Reads: the job's epoch and the five settled runs.
    assert (report.checked, report.pending, report.reads) == (5, 1, 6)
    failed = report.findings[2].record
    assert failed is not None and failed.error == "TerminalJobError: bad input"


def test_a_run_inside_its_retry_window_is_reported_only_once_it_settles(firestore_store):
    clock = FakeClock(T0 + timedelta(seconds=1))
    app, config = audit_app(
        firestore_store,
        {"etl": outcome_job},
        clock,
        schedules({"id": "etl", "schedule": "0 12 * * *"}),
    )
    audit = audit_of(firestore_store, app, config)
    assert audit.run(timedelta(hours=1)).findings == []
    clock.advance(seconds=SETTLE.total_seconds())
    assert findings(audit.run(timedelta(hours=1))) == [("etl", "2026-10-16T12:00:00Z", "missed")]


def test_stale_needs_the_lease_run_out_not_just_the_retry_window(firestore_store):
    clock = FakeClock(T0 + SETTLE)
    app, config = audit_app(
        firestore_store,
        {"etl": outcome_job},
        clock,
        schedules({"id": "etl", "schedule": "0 12 * * *"}),
    )
    audit = audit_of(firestore_store, app, config)
    run = audit.identity("etl", T0)
    long_job = run_record("slow", job="etl", lease_expires=T0 + SETTLE + LEASE)
    firestore_store.create(run.key, long_job)
    assert audit.run(timedelta(hours=1)).findings == []  # still running under a live lease
    clock.advance(seconds=(LEASE + MAX_CLOCK_SKEW).total_seconds())
    assert findings(audit.run(timedelta(hours=1))) == [("etl", "2026-10-16T12:00:00Z", "stale")]


# --- daylight saving (America/New_York: 2026-03-08 02:00 -> 03:00, 2026-11-01 02:00 -> 01:00)

NEW_YORK = {"timeZone": "America/New_York"}


def test_a_wall_time_the_clocks_skip_is_no_expected_run(firestore_store):
    clock = FakeClock(datetime(2026, 3, 8, 23, 0, tzinfo=UTC))
    raw = schedules({"id": "etl", "schedule": "30 2 * * *"} | NEW_YORK)
    app, config = audit_app(firestore_store, {"etl": outcome_job}, clock, raw)
    report = audit_of(firestore_store, app, config).run(timedelta(hours=20))
    # 02:30 did not exist in New York that day: nothing was expected, nothing is missed.
    assert (report.checked, report.findings) == (0, [])
    clock.advance(days=1)
    report = audit_of(firestore_store, app, config).run(timedelta(hours=20))
    assert findings(report) == [("etl", "2026-03-09T06:30:00Z", "missed")]


def test_a_repeated_wall_time_is_one_run_whichever_instant_it_ran_at(firestore_store):
    clock = FakeClock(datetime(2026, 11, 1, 23, 0, tzinfo=UTC))
    raw = schedules({"id": "etl", "schedule": "30 1 * * *"} | NEW_YORK)
    app, config = audit_app(firestore_store, {"etl": outcome_job}, clock, raw)
    audit = audit_of(firestore_store, app, config)
    report = audit.run(timedelta(hours=20))
    # 01:30 happened twice (05:30Z EDT, 06:30Z EST): one run expected, one finding,
    # two reads (and one for the job's epoch).
    assert findings(report) == [("etl", "2026-11-01T05:30:00Z", "missed")]
    assert (report.checked, report.reads) == (1, 3)

    second = datetime(2026, 11, 1, 6, 30, tzinfo=UTC)
    done = run_record(
        "late",
        Status.COMPLETED,
        job="etl",
        schedule_time=second,
        lease_expires=second + LEASE,
        expire_at=second + RETENTION,
    )
    firestore_store.create(audit.identity("etl", second).key, done)
    assert audit.run(timedelta(hours=20)).findings == []


def test_sub_hourly_schedules_across_both_transitions():
    def day(date: datetime) -> list[tuple[datetime, ...]]:
        (job,) = parse_schedules(schedules({"id": "etl", "schedule": "*/30 * * * *"} | NEW_YORK))
        start = date.replace(tzinfo=job.zone).astimezone(UTC)
        end = (date + timedelta(days=1)).replace(tzinfo=job.zone).astimezone(UTC)
        return [run.instants for run in schedule_times(job, start - timedelta(seconds=1), end)]

    spring = day(datetime(2026, 3, 8))
    assert len(spring) == 47  # 00:00 to 24:00 less 02:00 and 02:30
    fall = day(datetime(2026, 11, 1))
    assert len(fall) == 49
    assert sum(len(instants) == 2 for instants in fall) == 2  # 01:00 and 01:30, twice each


# --- catch-up


def counting_job(executions: Counter, lock: threading.Lock):
    def job(ctx: RunContext) -> None:
        with lock:
            executions[ctx.schedule_time] += 1
        threading.Event().wait(0.3)  # long enough for the racing delivery to arrive

    return job


def test_catch_up_and_a_late_scheduler_retry_run_each_missed_run_exactly_once(firestore_store):
    executions: Counter = Counter()
    clock = FakeClock(T0 + timedelta(seconds=1))
    # Catch-up reaches back 3500 s: the runs of 11:10 to 11:50 (11:00 is older).
    raw = schedules(
        {"id": "etl", "schedule": "*/10 * * * *", "catchUp": True, "catchUpMaxAgeSeconds": 3500}
    )
    app, _ = audit_app(
        firestore_store, {"etl": counting_job(executions, threading.Lock())}, clock, raw
    )
    caught = [T0 - timedelta(minutes=minutes) for minutes in (50, 40, 30, 20, 10)]
    missed = caught[:-1]  # each of these also gets a late Scheduler retry
    start = threading.Barrier(len(missed) + 1)
    answers: dict[str, Any] = {}

    def late_retry(when: datetime) -> None:
        start.wait(60)
        answers[stamp(when)] = deliver(app, scheduler_headers(job="etl", schedule_time=stamp(when)))

    def audit_delivery() -> None:
        start.wait(60)
        answers["audit"] = deliver(
            app, scheduler_headers(job=AUDIT_JOB_ID, schedule_time=stamp(T0))
        )

    threads = [threading.Thread(target=late_retry, args=(when,)) for when in missed]
    threads.append(threading.Thread(target=audit_delivery))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert answers["audit"].status == 200
    assert all(answer.status == 200 for answer in answers.values())
    assert executions == Counter({when: 1 for when in caught})
    audit = Audit(
        audit_settings({"DEDUP_SCHEDULES": raw} | SCOPE, app.settings),
        lease=LEASE,
        read=firestore_store.get_many,
        clock=clock,
        epochs=lambda jobs, now: {},
    )
    for when in caught:
        record = firestore_store.get(audit.identity("etl", when).key)
        assert record is not None and record.record.status is Status.COMPLETED


def test_catch_up_reruns_a_released_run_once_and_only_up_to_its_max_age(firestore_store, capsys):
    executions: Counter = Counter()
    flaky_once = {"left": 1}
    lock = threading.Lock()

    def flaky(ctx: RunContext) -> None:
        with lock:
            executions[ctx.schedule_time] += 1
            if ctx.schedule_time == T0 - timedelta(minutes=30) and flaky_once["left"]:
                flaky_once["left"] -= 1
                raise ConnectionError("upstream reset")

    clock = FakeClock(T0 - timedelta(minutes=30))
    raw = schedules(
        {"id": "etl", "schedule": "*/30 * * * *", "catchUp": True, "catchUpMaxAgeSeconds": 4000}
    )
    app, config = audit_app(firestore_store, {"etl": flaky}, clock, raw)
    released = deliver(
        app, scheduler_headers(job="etl", schedule_time=stamp(T0 - timedelta(minutes=30)))
    )
    assert released.outcome == "failed_retryable"
    clock.advance(minutes=30, seconds=1)

    report = audit_of(firestore_store, app, config, catch_up=True).run(timedelta(hours=2))

    by_time = {stamp(f.schedule_time): (f.finding, f.catch_up) for f in report.findings}
    assert by_time == {
        "2026-10-16T10:30:00Z": (Finding.MISSED, None),  # older than 4000 s: reported only
        "2026-10-16T11:00:00Z": (Finding.MISSED, "completed"),
        "2026-10-16T11:30:00Z": (Finding.RELEASED, "completed"),
    }
    assert executions == Counter({T0 - timedelta(minutes=30): 2, T0 - timedelta(hours=1): 1})
    again = audit_of(firestore_store, app, config, catch_up=True).run(timedelta(hours=2))
    assert [(stamp(f.schedule_time), f.catch_up) for f in again.findings] == [
        ("2026-10-16T10:30:00Z", None)
    ]


def test_catch_up_is_off_unless_the_job_opts_in(firestore_store):
    executions: Counter = Counter()
    clock = FakeClock(T0 + timedelta(minutes=30))
    raw = schedules({"id": "etl", "schedule": "0 12 * * *"})
    app, config = audit_app(
        firestore_store, {"etl": counting_job(executions, threading.Lock())}, clock, raw
    )
    report = audit_of(firestore_store, app, config, catch_up=True).run(timedelta(hours=1))
    assert [(f.finding, f.catch_up) for f in report.findings] == [(Finding.MISSED, None)]
    assert executions == Counter()


def test_a_caught_up_run_gets_the_body_its_scheduler_job_sends(firestore_store):
    bodies: list[bytes] = []
    clock = FakeClock(T0 + timedelta(minutes=30))
    raw = schedules(
        {"id": "etl", "schedule": "0 12 * * *", "catchUp": True, "body": '{"report": "sales"}'},
        {"id": "plain", "schedule": "0 12 * * *", "catchUp": True},
    )
    app, config = audit_app(
        firestore_store,
        {"etl": lambda ctx: bodies.append(ctx.body), "plain": lambda ctx: bodies.append(ctx.body)},
        clock,
        raw,
    )
    report = audit_of(firestore_store, app, config, catch_up=True).run(timedelta(hours=1))
    assert sorted((f.job, f.catch_up) for f in report.findings) == [
        ("etl", "completed"),
        ("plain", "completed"),
    ]
    assert sorted(bodies) == [b"", b'{"report": "sales"}']


# --- the audit job in the handler


def log_lines(capsys) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_the_reserved_job_logs_one_line_per_finding_and_a_summary_once(firestore_store, capsys):
    clock = FakeClock(T0 + timedelta(seconds=1))
    raw = schedules(
        {"id": "etl", "schedule": "0 * * * *"}, {"id": "report", "schedule": "0 9 * * *"}
    )
    app, _ = audit_app(firestore_store, {"etl": outcome_job, "report": outcome_job}, clock, raw)
    for hour in (8, 10):
        deliver(app, scheduler_headers(job="etl", schedule_time=f"2026-10-16T{hour:02d}:00:00Z"))
    capsys.readouterr()

    first = deliver(app, scheduler_headers(job=AUDIT_JOB_ID, schedule_time=stamp(T0)))
    again = deliver(app, scheduler_headers(job=AUDIT_JOB_ID, schedule_time=stamp(T0)))

    assert (first.status, first.outcome) == (200, "completed")
    assert (again.status, again.outcome) == (200, "duplicate_completed")
    lines = log_lines(capsys)
    found = [(line["outcome"], line["job"], line.get("schedule_time")) for line in lines]
    assert found[:5] == [
        ("run_missed", "etl", "2026-10-16T07:00:00Z"),
        ("run_missed", "etl", "2026-10-16T09:00:00Z"),
        ("run_failed", "etl", "2026-10-16T10:00:00Z"),
        ("run_missed", "etl", "2026-10-16T11:00:00Z"),
        ("run_missed", "report", "2026-10-16T09:00:00Z"),
    ]
    summaries = [line for line in lines if line["outcome"] == "audit_summary"]
    assert len(summaries) == 1  # the duplicate delivery did not audit again
    summary = summaries[0]
    assert (summary["findings"], summary["missed"], summary["failed"]) == (5, 4, 1)
    # A first audit reads each job's watermark shard (none yet), its epoch and its settled runs.
    assert (summary["checked"], summary["pending"], summary["reads"]) == (6, 1, 10)
    assert summary["before_epoch"] == 0
    assert [line["outcome"] for line in lines[-2:]] == ["completed", "duplicate_completed"]


# The deployed entry point with the machinery tests' own jobs, never the example's.
MACHINERY = {
    "DEDUP_JOBS_MODULE": machinery_jobs.MODULE,
    "PYTHONPATH": str(HANDLER_DIR.parent),
}


def test_start_up_stops_with_one_line_naming_a_scheduled_job_jobs_lacks():
    raw = schedules(
        {"id": "machinery-once", "schedule": "0 2 * * *"},
        {"id": "weekly-cleanup", "schedule": "0 3 * * 0"},
    )
    result = start_main(**SCOPE, **MACHINERY, DEDUP_SCHEDULES=raw)
    assert result.returncode != 0
    assert result.stderr.strip() == (
        "handler configuration error: DEDUP_SCHEDULES: job 'weekly-cleanup' is not defined "
        f"in {machinery_jobs.MODULE}.JOBS; every delivery of it would be refused"
    )


def test_start_up_accepts_schedules_for_the_jobs_it_has():
    raw = schedules({"id": "machinery-once", "schedule": "0 2 * * *", "catchUp": True})
    result = start_main(**SCOPE, **MACHINERY, DEDUP_SCHEDULES=raw)
    assert result.returncode == 0, result.stderr


def test_a_user_job_cannot_take_the_reserved_id():
    with pytest.raises(ConfigError, match="reserved for the audit"):
        check_jobs(
            AuditSettings((), timedelta(hours=1), "", ""), {AUDIT_JOB_ID: outcome_job}, "jobs"
        )
