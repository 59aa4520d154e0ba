"""The audit's epoch on the emulator: nothing before a job (as now scheduled) existed is judged."""

from __future__ import annotations

import json
import threading
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from runledger.audit import expected as expected_module
from runledger.audit.expected import (
    MAX_READS,
    AuditTooLarge,
    expected_runs,
    least_schedule_times,
    schedule_times,
)
from runledger.audit.runner import Audit
from runledger.delivery.app import App
from runledger.ledger.epochs import epoch_key, record_epochs
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.schedules import AUDIT_JOB_ID, AuditSettings, audit_settings, parse_schedules
from runledger.sdk.context import RunContext
from tests.handler.support import (
    LEASE,
    T0,
    FakeClock,
    deliver,
    make_app,
    scheduler_headers,
    settings,
)

SCOPE = {"DEDUP_ALLOWED_PROJECTS": "acme-prod", "DEDUP_ALLOWED_REGIONS": "europe-west1"}
WINDOW = timedelta(seconds=200)
SETTLE = WINDOW + LEASE + MAX_CLOCK_SKEW


def schedules(*entries: dict[str, Any]) -> str:
    defaults = {"timeZone": "UTC", "retryWindowSeconds": WINDOW.total_seconds()}
    return json.dumps([defaults | entry for entry in entries])


def configured(app: App, raw: str) -> AuditSettings:
    return audit_settings({"DEDUP_SCHEDULES": raw} | SCOPE, app.settings)


def audit_of(
    store, app: App, config: AuditSettings, seen: list | None = None, clock: Any = None
) -> Audit:
    """The handler's audit; `seen` collects the epochs each run used."""

    def epochs(jobs, now):
        found = record_epochs(store, config.project, config.region, jobs, now)
        if seen is not None:
            seen.append(found)
        return found

    read, now = app.ledger.read_many, clock or app.ledger.now
    return Audit(config, lease=LEASE, read=read, clock=now, epochs=epochs)


def findings(report) -> list[tuple[str, str, str]]:
    return [(f.job, f.schedule_time.strftime("%H:%M"), f.finding.value) for f in report.findings]


def epoch_doc(db, job: str):
    key = epoch_key("acme-prod", "europe-west1", job)
    return db.document(f"runledger_audit/scheduler_runs/epochs/{key}").get()


def test_fresh_deploy_reports_nothing_before_the_first_audit_and_8_audits_agree(
    firestore_store, firestore_db
):
    clock = FakeClock(T0 + timedelta(seconds=1))
    app = make_app(firestore_store, {"etl": lambda ctx: None}, clock, **SCOPE)
    config = configured(app, schedules({"id": "etl", "schedule": "*/10 * * * *"}))
    seen: list[dict[str, datetime]] = []
    start = threading.Barrier(8)
    reports: list = []

    def audit_once(offset_ms: int) -> None:
        # Each audit's clock reads a little differently, as on separate instances.
        own_clock = lambda: clock() + timedelta(milliseconds=offset_ms)  # noqa: E731
        audit = audit_of(firestore_store, app, config, seen, clock=own_clock)
        start.wait(60)
        reports.append(audit.run(timedelta(hours=6)))

    threads = [threading.Thread(target=audit_once, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    # Six hours of */10 with no record: none of it is reported, by any of the 8.
    assert len(reports) == 8 and all(report.findings == [] for report in reports)
    assert all(report.before_epoch == 36 and report.checked == 0 for report in reports)
    # One epoch, written once: every audit used the one the winning create wrote.
    epochs = {found["etl"] for found in seen}
    assert len(epochs) == 1
    doc = epoch_doc(firestore_db, "etl")
    assert doc.create_time == doc.update_time
    assert doc.to_dict()["epoch"] == epochs.pop()

    # Two hours later exactly the runs after the epoch are judged: all missed.
    clock.advance(hours=2)
    report = audit_of(firestore_store, app, config).run(timedelta(hours=6))
    missed = [T0 + timedelta(minutes=minutes) for minutes in range(10, 110 + 1, 10)]
    assert findings(report) == [("etl", f"{when:%H:%M}", "missed") for when in missed]
    assert epoch_doc(firestore_db, "etl").create_time == doc.create_time  # not written again


def test_a_schedule_change_resets_that_jobs_epoch_only_and_a_rollback_again(
    firestore_store, firestore_db
):
    clock = FakeClock(T0 - timedelta(hours=6))
    jobs = {"etl": lambda ctx: None, "report": lambda ctx: None}
    app = make_app(firestore_store, jobs, clock, **SCOPE)
    hourly = {"id": "etl", "schedule": "0 * * * *"}
    before = configured(app, schedules(hourly, {"id": "report", "schedule": "30 * * * *"}))
    audit_of(firestore_store, app, before).run()  # the deploy's first audit: epochs at 06:00
    clock.advance(hours=3)  # 09:00: report now runs at :45
    after = configured(app, schedules(hourly, {"id": "report", "schedule": "45 * * * *"}))
    seen: list[dict[str, datetime]] = []
    audit_of(firestore_store, app, after, seen).run()
    assert seen[-1] == {"etl": T0 - timedelta(hours=6), "report": T0 - timedelta(hours=3)}

    clock.advance(hours=3)  # 12:00
    report = audit_of(firestore_store, app, after).run(timedelta(hours=6))
    # etl is judged from 06:00; report's :45 only from the change at 09:00 on.
    assert findings(report) == [
        *(("etl", f"{hour:02d}:00", "missed") for hour in range(7, 12)),
        *(("report", f"{hour:02d}:45", "missed") for hour in range(9, 12)),
    ]
    # Rolled back to :30 at 12:00: its old epoch (06:00) does not count again.
    audit_of(firestore_store, app, before, seen).run()
    assert seen[-1]["report"] == T0
    assert seen[-1]["etl"] == T0 - timedelta(hours=6)


def test_a_job_added_later_is_judged_from_its_own_epoch(firestore_store):
    clock = FakeClock(T0 - timedelta(hours=4))
    app = make_app(
        firestore_store, {"etl": lambda ctx: None, "new": lambda ctx: None}, clock, **SCOPE
    )
    etl = {"id": "etl", "schedule": "0 * * * *"}
    audit_of(firestore_store, app, configured(app, schedules(etl))).run()  # 08:00
    clock.advance(hours=2)  # 10:00: "new" is deployed
    both = configured(app, schedules(etl, {"id": "new", "schedule": "0 * * * *"}))
    audit_of(firestore_store, app, both).run()
    clock.advance(hours=2)

    report = audit_of(firestore_store, app, both).run(timedelta(hours=6))

    assert findings(report) == [
        ("etl", "08:00", "missed"),  # at its epoch: judged
        ("etl", "09:00", "missed"),
        ("etl", "10:00", "missed"),
        ("etl", "11:00", "missed"),
        ("new", "10:00", "missed"),  # 07:00 to 09:00 are before its own epoch
        ("new", "11:00", "missed"),
    ]
    assert (report.before_epoch, report.pending) == (1 + 3, 2)


def test_with_catch_up_nothing_before_the_epoch_is_caught_up(firestore_store):
    executions: Counter = Counter()
    lock = threading.Lock()

    def job(ctx: RunContext) -> None:
        with lock:
            executions[ctx.schedule_time] += 1

    clock = FakeClock(T0 + timedelta(seconds=1))
    raw = schedules(
        {"id": "etl", "schedule": "*/10 * * * *", "catchUp": True, "catchUpMaxAgeSeconds": 3600}
    )
    config = audit_settings({"DEDUP_SCHEDULES": raw} | SCOPE, settings(**SCOPE))
    app = make_app(firestore_store, {"etl": job}, clock, audit=config, **SCOPE)

    first = deliver(app, scheduler_headers(job=AUDIT_JOB_ID, schedule_time="2026-10-16T12:00:00Z"))
    assert (first.status, executions) == (200, Counter())  # an hour of */10 not run
    clock.advance(seconds=(timedelta(minutes=20) + SETTLE).total_seconds())
    second = deliver(app, scheduler_headers(job=AUDIT_JOB_ID, schedule_time="2026-10-16T12:20:00Z"))
    assert second.status == 200
    assert executions == Counter({T0 + timedelta(minutes=10): 1, T0 + timedelta(minutes=20): 1})


def test_a_deleted_epoch_comes_back_from_its_lasting_copy(firestore_store, firestore_db):
    clock = FakeClock(T0 - timedelta(hours=3))
    app = make_app(firestore_store, {"etl": lambda ctx: None}, clock, **SCOPE)
    config = configured(app, schedules({"id": "etl", "schedule": "0 * * * *"}))
    audit_of(firestore_store, app, config).run()
    clock.advance(hours=3)
    epoch_doc(firestore_db, "etl").reference.delete()

    report = audit_of(firestore_store, app, config).run(timedelta(hours=6))

    # 09:00 to 11:00 were due under the deleted epoch: still judged, and the epoch is back.
    assert findings(report) == [("etl", f"{hour:02d}:00", "missed") for hour in (9, 10, 11)]
    assert epoch_doc(firestore_db, "etl").to_dict()["epoch"] == T0 - timedelta(hours=3)


def test_deleting_an_epoch_and_its_lasting_copy_judges_from_the_next_audit(
    firestore_store, firestore_db
):
    clock = FakeClock(T0 - timedelta(hours=3))
    app = make_app(firestore_store, {"etl": lambda ctx: None}, clock, **SCOPE)
    config = configured(app, schedules({"id": "etl", "schedule": "0 * * * *"}))
    audit_of(firestore_store, app, config).run()
    clock.advance(hours=3)
    key = epoch_key("acme-prod", "europe-west1", "etl")
    epoch_doc(firestore_db, "etl").reference.delete()
    firestore_db.document(f"runledger_epochs/scheduler_runs/epochs/{key}").delete()

    report = audit_of(firestore_store, app, config).run(timedelta(hours=6))

    # The operator's reset: 09:00 to 11:00 are no longer judged.
    assert (report.findings, report.before_epoch, report.pending) == ([], 5, 1)
    assert epoch_doc(firestore_db, "etl").to_dict()["epoch"] == clock()


# --- the read cap, refused before listing


def test_an_audit_far_over_the_cap_is_refused_before_listing_a_schedule_time(monkeypatch):
    raw = json.dumps(
        [
            {
                "id": f"job-{i}",
                "schedule": "* * * * *",
                "timeZone": "UTC",
                "retryWindowSeconds": 200,
            }
            for i in range(300)
        ]
    )
    jobs = parse_schedules(raw)

    def listing(*args: Any) -> list:
        raise AssertionError("listed schedule times of an audit its lower bound refuses")

    monkeypatch.setattr(expected_module, "schedule_times", listing)
    with pytest.raises(AuditTooLarge, match=f"more than {MAX_READS} reads"):
        expected_runs(jobs, T0 - timedelta(hours=6), T0)


@pytest.mark.parametrize(
    ("schedule", "zone", "day"),
    [
        ("* * * * *", "UTC", T0),
        ("*/7 * * * *", "America/New_York", datetime(2026, 3, 8, 12)),
        ("0,30 * * * *", "America/New_York", datetime(2026, 11, 1, 12)),
        ("15 9-17 * * 1-5", "Europe/Berlin", datetime(2026, 3, 29, 12)),
        ("5 * * * 0,7", "Australia/Lord_Howe", datetime(2026, 4, 5, 12)),
        ("0 2 * * *", "America/New_York", datetime(2026, 3, 8, 12)),
        ("0 0 1 * *", "UTC", T0),
    ],
)
@pytest.mark.parametrize("window", [timedelta(hours=3), timedelta(days=1), timedelta(days=15)])
def test_the_lower_bound_never_exceeds_the_schedule_times_listed(schedule, zone, day, window):
    (job,) = parse_schedules(schedules({"id": "etl", "schedule": schedule, "timeZone": zone}))
    end = day.replace(tzinfo=job.zone) + timedelta(minutes=17)
    for start in (end - window, end - window - timedelta(hours=11, minutes=3)):
        assert least_schedule_times(job, start, end) <= len(schedule_times(job, start, end))
