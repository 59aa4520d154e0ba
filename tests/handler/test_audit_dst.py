"""Daylight saving end to end on the emulator: the handler and the audit agree on one run per
wall time (Europe/Berlin: 2026-03-29 02:00 -> 03:00, 2026-10-25 03:00 -> 02:00)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

from runledger.audit.runner import Audit
from runledger.delivery.identify import run_key
from runledger.ledger.epochs import record_epochs
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.schedules import AUDIT_JOB_ID, audit_settings
from runledger.sdk.context import RunContext
from runledger.service.app import App
from tests.handler.support import LEASE, FakeClock, deliver, make_app, scheduler_headers, settings

SCOPE = {"DEDUP_ALLOWED_PROJECTS": "acme-prod", "DEDUP_ALLOWED_REGIONS": "europe-west1"}
WINDOW = timedelta(seconds=200)
BERLIN = "Europe/Berlin"


def berlin_app(store, schedule: str, clock: FakeClock, executions: Counter) -> tuple[App, Audit]:
    lock = threading.Lock()

    def job(ctx: RunContext) -> None:
        with lock:
            executions[ctx.schedule_time] += 1

    entry = {
        "id": "etl",
        "schedule": schedule,
        "timeZone": BERLIN,
        "retryWindowSeconds": WINDOW.total_seconds(),
    }
    config = audit_settings({"DEDUP_SCHEDULES": json.dumps([entry])} | SCOPE, settings(**SCOPE))
    app = make_app(store, {"etl": job}, clock, audit=config, **SCOPE)
    # As App.from_env does: the handler knows each job's time zone from DEDUP_SCHEDULES.
    app.zones = {schedule.id: schedule.zone for schedule in config.schedules}
    record_epochs(store, config.project, config.region, config.schedules, clock())
    audit = Audit(
        config,
        lease=LEASE,
        read=app.ledger.read_many,
        clock=clock,
        epochs=lambda jobs, now: record_epochs(store, config.project, config.region, jobs, now),
    )
    return app, audit


def send(app: App, clock: FakeClock, stamp: str, at: datetime) -> str:
    """Deliver etl stamped `stamp` (an offset time, as Scheduler writes it) at instant `at`."""
    clock.advance(seconds=(at - clock()).total_seconds())
    answer = deliver(app, scheduler_headers(job="etl", schedule_time=stamp))
    assert answer.status == 200, answer
    return answer.outcome


def test_a_fall_back_day_runs_a_repeated_wall_time_once_and_the_audit_agrees(firestore_store):
    executions: Counter = Counter()
    clock = FakeClock(datetime(2026, 10, 24, 22, 0, tzinfo=UTC))
    app, audit = berlin_app(firestore_store, "30 2 * * *", clock, executions)
    first, second = (
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
    )

    # Scheduler fires 02:30 at both instants the clocks give it, each with its own offset.
    assert send(app, clock, "2026-10-25T02:30:00+02:00", first) == "completed"
    assert send(app, clock, "2026-10-25T02:30:00+01:00", second) == "duplicate_completed"
    # A retry of the second, in UTC, is that run too.
    assert send(app, clock, "2026-10-25T01:30:00Z", second + timedelta(seconds=9)) == (
        "duplicate_completed"
    )

    assert executions == Counter({first: 1})
    clock.advance(hours=2)
    report = audit.run(timedelta(hours=5))
    assert (report.checked, report.findings) == (1, [])


def test_a_fall_back_day_where_only_the_second_instant_fires_is_one_run(firestore_store):
    executions: Counter = Counter()
    clock = FakeClock(datetime(2026, 10, 24, 22, 0, tzinfo=UTC))
    app, audit = berlin_app(firestore_store, "30 2 * * *", clock, executions)
    second = datetime(2026, 10, 25, 1, 30, tzinfo=UTC)

    assert send(app, clock, "2026-10-25T02:30:00+01:00", second) == "completed"

    assert sum(executions.values()) == 1
    clock.advance(hours=2)
    assert audit.run(timedelta(hours=5)).findings == []


def test_every_other_run_key_is_unchanged_by_the_time_zone(firestore_store):
    executions: Counter = Counter()
    clock = FakeClock(datetime(2026, 10, 25, 12, 0, tzinfo=UTC))
    app, _ = berlin_app(firestore_store, "*/30 * * * *", clock, executions)
    when = datetime(2026, 10, 25, 11, 30, tzinfo=UTC)

    send(app, clock, "2026-10-25T12:30:00+01:00", clock())

    expected = run_key("etl", when, "acme-prod", "europe-west1", manual=False)
    assert firestore_store.get(expected) is not None


def test_sub_hourly_runs_on_a_fall_back_day_run_once_per_wall_time(firestore_store):
    executions: Counter = Counter()
    clock = FakeClock(datetime(2026, 10, 24, 23, 59, tzinfo=UTC))
    app, audit = berlin_app(firestore_store, "*/30 * * * *", clock, executions)
    # 02:00 and 02:30 happen twice (00:00Z, 00:30Z CEST and 01:00Z, 01:30Z CET); then 03:00.
    instants = [
        datetime(2026, 10, 25, 0, 0, tzinfo=UTC) + timedelta(minutes=30 * i) for i in range(5)
    ]
    for instant in instants:
        send(app, clock, instant.isoformat(), instant + timedelta(seconds=1))

    assert executions == Counter({instants[0]: 1, instants[1]: 1, instants[4]: 1})
    clock.advance(minutes=10)  # 03:00 CET has settled
    report = audit.run(timedelta(hours=3))
    assert (report.checked, report.findings) == (3, [])


def test_a_spring_forward_day_runs_a_delivery_in_the_gap_once_and_expects_none(firestore_store):
    executions: Counter = Counter()
    clock = FakeClock(datetime(2026, 3, 28, 22, 0, tzinfo=UTC))
    app, audit = berlin_app(firestore_store, "30 2 * * *", clock, executions)
    # 02:30 does not exist that day; should Scheduler fire at the end of the gap, it runs once.
    moved = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert send(app, clock, "2026-03-29T03:00:00+02:00", moved) == "completed"
    assert send(app, clock, "2026-03-29T01:00:00Z", moved + timedelta(seconds=30)) == (
        "duplicate_completed"
    )

    assert executions == Counter({moved: 1})
    clock.advance(hours=3)
    report = audit.run(timedelta(hours=6))
    # No run was expected that night: nothing missed, nothing invented.
    assert (report.checked, report.findings) == (0, [])
    # The next day's 02:30 CEST is expected again.
    clock.advance(days=1)
    (missed,) = audit.run(timedelta(hours=6)).findings
    assert missed.schedule_time == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)


def test_the_smallest_accepted_look_back_judges_a_repeated_wall_time(firestore_store):
    """Audits every 30 minutes with a look-back of the interval, one run's settling time and
    the repeated hour (what the plan accepts at the least: `audit_parser.check_audit`) judge
    02:30 once settled, though it settles from its second instant, an hour after its first."""
    executions: Counter = Counter()
    clock = FakeClock(datetime(2026, 10, 24, 22, 0, tzinfo=UTC))
    _, audit = berlin_app(firestore_store, "30 2 * * *", clock, executions)
    lookback = timedelta(minutes=30) + WINDOW + LEASE + MAX_CLOCK_SKEW + timedelta(hours=1)
    judged = []
    for _ in range(12):
        clock.advance(minutes=30)
        judged += [f.schedule_time for f in audit.run(lookback).findings]

    assert judged == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC)]  # missed: nothing ran


def test_a_repeated_wall_time_whose_first_instant_left_the_look_back_is_not_judged(
    firestore_store,
):
    """Its record expires from its first instant, so past it the run may read as absent:
    reporting it missed would report a run that ran (the simulator's seed 21, TTL)."""
    executions: Counter = Counter()
    clock = FakeClock(datetime(2026, 10, 24, 22, 0, tzinfo=UTC))
    _, audit = berlin_app(firestore_store, "30 2 * * *", clock, executions)
    # No record: as a run that completed at its first instant reads once TTL deleted it.
    clock.advance(hours=4, minutes=30)  # 02:30 CEST is 2 h back, 02:30 CET 1 h
    assert audit.run(timedelta(minutes=90)).findings == []


def test_the_audit_delivery_names_the_berlin_run_once(firestore_store, capsys):
    executions: Counter = Counter()
    clock = FakeClock(datetime(2026, 10, 24, 22, 0, tzinfo=UTC))
    app, _ = berlin_app(firestore_store, "30 2 * * *", clock, executions)
    clock.advance(hours=5)
    capsys.readouterr()

    answer = deliver(app, scheduler_headers(job=AUDIT_JOB_ID, schedule_time="2026-10-25T03:00:00Z"))

    assert answer.status == 200
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert [line["schedule_time"] for line in lines if line["outcome"] == "run_missed"] == [
        "2026-10-25T00:30:00Z"
    ]
