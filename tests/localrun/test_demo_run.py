"""A short seeded `make demo` against the official emulator: the invariant holds, and every
kind of misbehaviour the simulator promises really happened in that run."""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dedup_schedule.config.model import ScheduleConfig
from runledger.facts import OUTCOME_OVERLAP_SKIPPED
from scheduler_dedup.localrun.demo import main, run_demo
from scheduler_dedup.localrun.demo_invariant import (
    FATE_DROPPED,
    FATE_EXHAUSTED,
    FATE_RAN_ONCE,
    FATE_SKIPPED,
)
from scheduler_dedup.localrun.emulator import FirestoreEmulator
from tests.localrun.demo_project import (
    DEMO_ARGS,
    DEMO_NOW,
    DEMO_OPTIONS,
    demo_stack,
    run_lines_disagreeing_with_the_report,
)

pytestmark = pytest.mark.firestore


def _empty_ledger(emulator: FirestoreEmulator, config: ScheduleConfig) -> None:
    """The handler writes under the stack's project, and two demos in one hour replay the
    same schedule times: start from an empty ledger (and no audit epochs)."""
    emulator.clear(config.database.name, project=config.project)


def _assert_each_run_has_its_reported_fate(report: dict, invariant) -> None:
    """Ground truth from the execution log, counted by the fate the report gives each run.

    A run ran once, or it is one of the runs the demo makes end otherwise: never
    delivered, retries exhausted (both reported by the audit), or skipped by its
    job's overlap policy (deliberately not run). Each of those is at most one run.
    """
    assert invariant.holds, invariant.violations
    fates = Counter(run["fate"] for run in report["runs"])
    assert set(fates) <= {FATE_RAN_ONCE, FATE_DROPPED, FATE_EXHAUSTED, FATE_SKIPPED}, fates
    assert fates[FATE_DROPPED] <= 1 and fates[FATE_EXHAUSTED] <= 1 and fates[FATE_SKIPPED] <= 1
    for run in report["runs"]:
        expected = 1 if run["fate"] == FATE_RAN_ONCE else 0
        assert run["successful_executions"] == expected, run
        outcomes = {delivery["outcome"] for delivery in run["deliveries"]}
        if run["fate"] == FATE_SKIPPED:
            assert OUTCOME_OVERLAP_SKIPPED in outcomes, run
        if run["fate"] == FATE_DROPPED:
            assert run["fault"] == "dropped" and run["deliveries"] == [], run
    assert [r["run"] for r in report["runs"] if r["fate"] == FATE_SKIPPED] == invariant.skipped


def _seeded_demo(emulator: FirestoreEmulator, now: datetime, **options: bool):
    config = demo_stack()
    _empty_ledger(emulator, config)
    out = io.StringIO()
    invariant, report = run_demo(
        DEMO_OPTIONS(runs=3, seed=11, **options), config, out, emulator, now=now
    )
    return invariant, report, out.getvalue()


def _assert_the_seeded_demo_holds(invariant, report: dict, text: str) -> None:
    assert invariant.holds, text
    assert run_lines_disagreeing_with_the_report(text, report) == [], text
    missing = [kind for kind, count in report["misbehaviour"].items() if count == 0]
    assert missing == [], text
    _assert_each_run_has_its_reported_fate(report, invariant)
    # The Scheduler's view really was at-least-once: more deliveries than runs.
    jobs = {row["job"]: row for row in report["jobs"]}
    assert set(jobs) == {job.id for job in demo_stack().jobs}
    assert sum(row["deliveries"] for row in jobs.values()) > len(report["runs"])
    assert sum(row["duplicates_200"] + row["duplicates_409"] for row in jobs.values()) > 0
    assert "invariant HOLDS" in text
    assert "p95 ms" in text
    # The audit, through the handler's reserved job, reports exactly the dropped
    # run as missed and the exhausted one as released, and nothing it skipped.
    (dropped,) = invariant.dropped
    (exhausted,) = invariant.exhausted
    audit = report["audit"]
    assert audit["status"] == 200 and audit["accounts_for_every_run"], text
    findings = {item["run"]: item["finding"] for item in audit["findings"]}
    assert findings == {dropped: "missed", exhausted: "released"}
    assert audit["summary"]["findings"] == 2 and audit["summary"]["caught_up"] == 0
    assert "audit ACCOUNTS for every run" in text


def test_seeded_demo_keeps_the_invariant_under_every_misbehaviour(firestore_emulator) -> None:
    invariant, report, text = _seeded_demo(firestore_emulator, DEMO_NOW)
    _assert_the_seeded_demo_holds(invariant, report, text)
    # At this instant the overlap skip takes a run the Scheduler delivered: it counts
    # as deliberately not run, not as a run that should have succeeded.
    assert len(invariant.skipped) == 1


# Spread over a day and the year: before and after the hour the overlap skip moves
# onto a counted run, midday, inside Berlin's spring-forward gap (01:00-02:00 UTC on
# 2026-03-29) and fall-back repeat (2026-10-25), New York's fall-back day, a year end.
PINNED_INSTANTS = (
    datetime(2026, 12, 2, 0, 55, tzinfo=UTC),
    datetime(2026, 12, 2, 13, 40, tzinfo=UTC),
    datetime(2026, 3, 29, 1, 30, tzinfo=UTC),
    datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
    datetime(2026, 11, 2, 12, 20, tzinfo=UTC),
    datetime(2026, 12, 31, 23, 50, tzinfo=UTC),
)


@pytest.mark.parametrize("now", PINNED_INSTANTS, ids=lambda now: now.strftime("%Y%m%dT%H%M"))
def test_the_seeded_demo_holds_at_any_instant(firestore_emulator, now: datetime) -> None:
    invariant, report, text = _seeded_demo(firestore_emulator, now)
    _assert_the_seeded_demo_holds(invariant, report, text)
    assert report["settings"]["started"].startswith(now.strftime("%Y-%m-%dT%H:%M")), report


def test_with_catch_up_the_audit_finishes_both_runs_exactly_once(firestore_emulator) -> None:
    invariant, report, text = _seeded_demo(firestore_emulator, DEMO_NOW, catch_up=True)
    assert invariant.holds, text
    assert invariant.dropped == invariant.exhausted == []
    audit = report["audit"]
    assert {item["finding"]: item["catch_up"] for item in audit["findings"]} == {
        "missed": "completed",
        "released": "completed",
    }
    # Ground truth from the execution log: every run's work, the two caught up
    # included, succeeded exactly once, but a run its job's overlap policy skipped.
    caught_up = {item["run"] for item in audit["findings"]}
    runs = {run["run"]: run for run in report["runs"]}
    assert caught_up <= set(runs)
    assert all(runs[run]["fate"] == FATE_RAN_ONCE for run in caught_up)
    _assert_each_run_has_its_reported_fate(report, invariant)


def test_json_report_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The JSON path is the edge only; the full run is covered above.
    from scheduler_dedup.localrun import demo
    from scheduler_dedup.localrun.demo_invariant import check_invariant

    monkeypatch.setattr(
        demo,
        "run_demo",
        lambda *a, **k: (check_invariant([], []), {"invariant": {"holds": True}, "verdict": "v"}),
    )
    target = tmp_path / "report.json"
    assert main(["--runs", "1", "--json", str(target), *DEMO_ARGS], out=io.StringIO()) == 0
    assert json.loads(target.read_text())["invariant"]["holds"] is True


def test_without_the_ledger_the_demo_catches_doubled_work_and_exits_1() -> None:
    # A handler that trusts Scheduler to deliver once: lost acks, bursts and
    # timeouts now run the work again, and the command must fail.
    out = io.StringIO()
    assert main(["--runs", "2", "--seed", "11", "--without-dedup", *DEMO_ARGS], out=out) == 1
    text = out.getvalue()
    assert "invariant VIOLATED" in text
    assert "(must be exactly once)" in text
