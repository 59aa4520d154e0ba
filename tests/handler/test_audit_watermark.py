"""The handler's audit from its watermarks, on the emulator: each settled run read once."""

from __future__ import annotations

import json
import threading
from collections.abc import Collection
from datetime import timedelta
from typing import Any

from runledger.audit import runner as audit_module
from runledger.audit.findings import Finding
from runledger.audit.runner import Audit
from runledger.ledger.watermarks import LedgerMarks, shard_key
from runledger.schedules import AUDIT_JOB_ID, AuditSettings
from runledger.service.app import App
from tests.handler.support import T0, FakeClock, deliver, scheduler_headers
from tests.handler.test_audit import audit_app, move_to, schedules, stamp

JOBS = [f"etl-{index:02d}" for index in range(12)]
MISSED = ("etl-03", T0.replace(hour=9))


def hourly_app(firestore_store, clock: FakeClock) -> tuple[App, AuditSettings]:
    raw = schedules(*({"id": job, "schedule": "0 * * * *"} for job in JOBS))
    return audit_app(firestore_store, {job: lambda ctx: None for job in JOBS}, clock, raw)


def run_hours(app: App, clock: FakeClock, hours: range, skip: Collection[tuple] = ()) -> None:
    """Deliver each job's run of each hour, on time, except those in `skip` (job, time)."""
    for hour in hours:
        when = T0.replace(hour=hour)
        move_to(clock, when + timedelta(seconds=5))
        for job in JOBS:
            if (job, when) not in skip:
                deliver(app, scheduler_headers(job=job, schedule_time=stamp(when)))


def audit_delivery(app: App, clock: FakeClock, capsys) -> list[dict[str, Any]]:
    """Deliver the audit job for the clock's minute; its log lines."""
    capsys.readouterr()
    answer = deliver(
        app, scheduler_headers(job=AUDIT_JOB_ID, schedule_time=stamp(clock().replace(second=0)))
    )
    assert (answer.status, answer.outcome) == (200, "completed")
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def summary_of(lines: list[dict[str, Any]]) -> dict[str, Any]:
    (summary,) = [line for line in lines if line["outcome"] == "audit_summary"]
    return summary


def reported(lines: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [
        (line["outcome"], line["job"], line["schedule_time"])
        for line in lines
        if line["outcome"].startswith("run_")
    ]


def test_a_second_audit_reads_at_most_one_document_per_job_and_reports_nothing_twice(
    firestore_store, capsys
):
    clock = FakeClock(T0 - timedelta(hours=6))
    app, config = hourly_app(firestore_store, clock)
    run_hours(app, clock, range(7, 13), skip={MISSED})
    move_to(clock, T0 + timedelta(minutes=1))

    first = audit_delivery(app, clock, capsys)
    assert reported(first) == [("run_missed", "etl-03", "2026-10-16T09:00:00Z")]
    shards = len({shard_key(config.project, config.region, job) for job in JOBS})
    assert summary_of(first)["reads"] == shards + len(JOBS) + 5 * len(JOBS)

    clock.advance(seconds=60)
    second = audit_delivery(app, clock, capsys)

    # No new run settled: the shards, and the one open finding, which is shown, not logged.
    summary = summary_of(second)
    assert reported(second) == []
    assert summary["reads"] == shards + 1 <= len(JOBS) + 1
    assert (summary["findings"], summary["open"], summary["checked"]) == (0, 1, 1)
    assert summary["open_findings"] == [
        {"job": "etl-03", "schedule_time": "2026-10-16T09:00:00Z", "finding": "missed"}
    ]
    assert "1 reported earlier, still open" in summary["message"]

    # The missed run is delivered late and completes; the 12:00 runs settle.
    deliver(app, scheduler_headers(job="etl-03", schedule_time=stamp(MISSED[1])))
    move_to(clock, T0 + timedelta(hours=1))
    third = audit_delivery(app, clock, capsys)

    summary = summary_of(third)
    assert (reported(third), summary["open"], summary["open_findings"]) == ([], 0, [])
    # Each 12:00 run read once, and the formerly open run once more; nothing else.
    assert (summary["checked"], summary["reads"]) == (len(JOBS) + 1, shards + len(JOBS) + 1)

    clock.advance(seconds=60)
    fourth = summary_of(audit_delivery(app, clock, capsys))
    assert (fourth["reads"], fourth["checked"], fourth["open"]) == (shards, 0, 0)


def test_a_finding_whose_run_turns_out_worse_is_reported_again_as_what_it_is_now(
    firestore_store, capsys
):
    clock = FakeClock(T0 - timedelta(hours=6))
    app, _ = hourly_app(firestore_store, clock)
    run_hours(app, clock, range(7, 12), skip={MISSED})
    move_to(clock, T0 + timedelta(minutes=1))
    assert reported(audit_delivery(app, clock, capsys)) == [
        ("run_missed", "etl-03", "2026-10-16T09:00:00Z")
    ]
    app.jobs = {**app.jobs, "etl-03": _fails_for_good}
    deliver(app, scheduler_headers(job="etl-03", schedule_time=stamp(MISSED[1])))
    clock.advance(seconds=60)

    again = audit_delivery(app, clock, capsys)

    assert reported(again) == [("run_failed", "etl-03", "2026-10-16T09:00:00Z")]
    assert summary_of(again)["open"] == 0  # reported now, so not among the earlier ones


def _fails_for_good(ctx) -> None:
    from runledger.exceptions import TerminalJobError

    raise TerminalJobError("bad input")


class _RacingMarks(LedgerMarks):
    """Marks whose save waits until every racing audit has judged."""

    def __init__(self, inner: LedgerMarks, barrier: threading.Barrier) -> None:
        self.__dict__.update(inner.__dict__)
        self._barrier = barrier

    def save(self, marks):  # type: ignore[no-untyped-def]
        self._barrier.wait(120)
        return super().save(marks)


def test_two_audits_racing_both_report_the_finding_and_the_watermark_never_goes_back(
    firestore_store, firestore_db
):
    clock = FakeClock(T0 - timedelta(hours=6))
    app, config = hourly_app(firestore_store, clock)
    run_hours(app, clock, range(7, 12), skip={MISSED})
    move_to(clock, T0 + timedelta(minutes=1))
    barrier = threading.Barrier(2)
    logged: list = []

    def audit_once(offset_s: int) -> None:
        marks = _RacingMarks(app.ledger.audit_marks(config.project, config.region), barrier)
        own_clock = lambda: clock() + timedelta(seconds=offset_s)  # noqa: E731
        audit = Audit(
            config,
            lease=app.settings.lease,
            read=app.ledger.read_many,
            clock=own_clock,
            marks=marks,
            emit=logged.extend,
        )
        audit.run()

    threads = [threading.Thread(target=audit_once, args=(offset,)) for offset in (0, 60)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    # Both judged the same runs and logged what they found before their writes: the
    # one true finding, once by each (never lost to the race, never another).
    assert [(item.job, item.schedule_time, item.finding) for item in logged] == [
        ("etl-03", MISSED[1], Finding.MISSED)
    ] * 2
    # Every shard was written by one audit; the watermarks are that audit's, never mixed.
    marks = app.ledger.audit_marks(config.project, config.region)
    states = marks.load(config.schedules, clock())
    judged = {state.mark.judged_to for state in states.values() if state.mark is not None}
    assert len(states) == len(JOBS) and judged == {T0.replace(hour=11)}


def test_over_the_read_budget_the_rest_waits_behind_the_watermark_for_the_next_audit(
    firestore_store, capsys, monkeypatch
):
    clock = FakeClock(T0 - timedelta(hours=6))
    app, _ = hourly_app(firestore_store, clock)
    run_hours(app, clock, range(7, 12), skip={MISSED})
    move_to(clock, T0 + timedelta(minutes=1))
    monkeypatch.setattr(audit_module, "READ_BUDGET", 3 * len(JOBS))

    first = summary_of(audit_delivery(app, clock, capsys))
    clock.advance(seconds=60)
    second = audit_delivery(app, clock, capsys)

    # 07:00-09:00 first, 10:00 and 11:00 next: every settled run judged once, none lost.
    assert (first["checked"], first["deferred"], first["missed"]) == (36, 24, 1)
    summary = summary_of(second)
    assert (summary["checked"], summary["deferred"], summary["open"]) == (25, 0, 1)
    assert reported(second) == []


def test_runs_that_leave_the_look_back_before_any_audit_judges_them_are_named_not_lost(
    firestore_store, capsys
):
    clock = FakeClock(T0 - timedelta(hours=6))
    app, _ = hourly_app(firestore_store, clock)
    run_hours(app, clock, range(7, 12))
    move_to(clock, T0 + timedelta(minutes=1))
    audit_delivery(app, clock, capsys)  # judged to 11:00
    clock.advance(hours=12)  # no audit for 12 hours: the look-back is 6

    lines = audit_delivery(app, clock, capsys)

    summary = summary_of(lines)
    # 12:00 to 18:00 left the look-back unjudged; 19:00 to 23:00 are judged: missed.
    assert summary["expired"] == 7 * len(JOBS)
    assert "84 run(s) left the look-back unjudged" in summary["message"]
    assert summary["severity"] == "WARNING"
    assert (summary["checked"], summary["missed"]) == (5 * len(JOBS), 5 * len(JOBS))
    # Each job's unjudged span is one line naming it, counted by the missed-runs alert.
    unjudged = [line for line in lines if line["outcome"] == "job_runs_unjudged"]
    assert sorted(line["job"] for line in unjudged) == sorted(JOBS)
    assert {(line["from"], line["to"]) for line in unjudged} == {
        ("2026-10-16T12:00:00Z", "2026-10-16T18:00:00Z")
    }
    assert all(line["severity"] == "ERROR" for line in unjudged)
    assert "7 scheduled run(s) from 2026-10-16T12:00:00Z" in unjudged[0]["detail"]
    # Once named, never again: the next audit starts from the new watermark.
    clock.advance(seconds=600)
    later = audit_delivery(app, clock, capsys)
    assert not [line for line in later if line["outcome"] == "job_runs_unjudged"]


def test_open_runs_over_the_budget_stay_open_unread_and_are_read_by_a_later_audit(
    firestore_store, capsys, monkeypatch
):
    clock = FakeClock(T0 - timedelta(hours=6))
    app, _ = hourly_app(firestore_store, clock)
    run_hours(app, clock, range(7, 13), skip={MISSED})
    move_to(clock, T0 + timedelta(minutes=1))
    first = audit_delivery(app, clock, capsys)
    assert summary_of(first)["missed"] == 1
    monkeypatch.setattr(audit_module, "READ_BUDGET", 0)  # a share of one run a job
    deliver(app, scheduler_headers(job="etl-03", schedule_time=stamp(MISSED[1])))
    move_to(clock, T0 + timedelta(hours=1))

    second = summary_of(audit_delivery(app, clock, capsys))

    # etl-03's one read went to its open 09:00 run (now completed): its 12:00 run waits.
    assert (second["open"], second["deferred"], second["checked"]) == (0, 1, len(JOBS))
    clock.advance(seconds=60)
    third = summary_of(audit_delivery(app, clock, capsys))
    assert (third["open"], third["deferred"], third["checked"]) == (0, 0, 1)


def test_open_findings_over_the_budget_are_shown_as_last_judged_without_a_read(
    firestore_store, capsys, monkeypatch
):
    clock = FakeClock(T0 - timedelta(hours=6))
    app, config = hourly_app(firestore_store, clock)
    later = ("etl-03", T0.replace(hour=10))
    run_hours(app, clock, range(7, 13), skip={MISSED, later})
    move_to(clock, T0 + timedelta(minutes=1))
    assert summary_of(audit_delivery(app, clock, capsys))["missed"] == 2
    monkeypatch.setattr(audit_module, "READ_BUDGET", 0)  # a share of one run a job
    move_to(clock, T0 + timedelta(hours=1))

    summary = summary_of(audit_delivery(app, clock, capsys))

    # etl-03 reads its oldest open run (still missed); the other is carried unread.
    shards = len({shard_key(config.project, config.region, job) for job in JOBS})
    assert (summary["reads"], summary["checked"], summary["deferred"]) == (shards + 12, 12, 1)
    assert (summary["findings"], summary["open"]) == (0, 2)
    assert [entry["schedule_time"] for entry in summary["open_findings"]] == [
        "2026-10-16T09:00:00Z",
        "2026-10-16T10:00:00Z",
    ]
