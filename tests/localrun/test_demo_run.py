"""A short seeded `make demo` against the official emulator: the invariant holds, and every
kind of misbehaviour the simulator promises really happened in that run."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from dedup_schedule.config.model import ScheduleConfig
from localrun.demo import DemoOptions, main, run_demo
from localrun.emulator import FirestoreEmulator
from tests.localrun.demo_project import DEMO_ARGS, demo_stack

pytestmark = pytest.mark.firestore


def _empty_ledger(emulator: FirestoreEmulator, config: ScheduleConfig) -> None:
    """The handler writes under the stack's project, and two demos in one hour replay the
    same schedule times: start from an empty ledger (and no audit epochs)."""
    emulator.clear(config.database.name, project=config.project)


def test_seeded_demo_keeps_the_invariant_under_every_misbehaviour(firestore_emulator) -> None:
    config = demo_stack()
    _empty_ledger(firestore_emulator, config)
    out = io.StringIO()
    invariant, report = run_demo(
        DemoOptions(runs=3, seed=11, demo_jobs=True), config, out, firestore_emulator
    )

    assert invariant.holds, out.getvalue()
    missing = [kind for kind, count in report["misbehaviour"].items() if count == 0]
    assert missing == [], out.getvalue()
    # Ground truth from the execution log: every run succeeded exactly once, but the
    # one whose retries ran out and the one the Scheduler never delivered.
    for run in report["runs"]:
        expected = 0 if run["run"] in invariant.exhausted + invariant.dropped else 1
        assert run["successful_executions"] == expected, run
    # The Scheduler's view really was at-least-once: more deliveries than runs.
    jobs = {row["job"]: row for row in report["jobs"]}
    assert set(jobs) == {job.id for job in config.jobs}
    assert sum(row["deliveries"] for row in jobs.values()) > len(report["runs"])
    assert sum(row["duplicates_200"] + row["duplicates_409"] for row in jobs.values()) > 0
    text = out.getvalue()
    assert "invariant HOLDS" in text
    assert "p95 ms" in text
    # The audit, through the handler's reserved job, reports exactly the dropped
    # run as missed and the exhausted one as released.
    (dropped,) = invariant.dropped
    (exhausted,) = invariant.exhausted
    audit = report["audit"]
    assert audit["status"] == 200 and audit["accounts_for_every_run"], text
    findings = {item["run"]: item["finding"] for item in audit["findings"]}
    assert findings == {dropped: "missed", exhausted: "released"}
    assert audit["summary"]["findings"] == 2 and audit["summary"]["caught_up"] == 0
    assert "audit ACCOUNTS for every run" in text


def test_with_catch_up_the_audit_finishes_both_runs_exactly_once(firestore_emulator) -> None:
    config = demo_stack()
    _empty_ledger(firestore_emulator, config)
    out = io.StringIO()
    options = DemoOptions(runs=3, seed=11, catch_up=True, demo_jobs=True)
    invariant, report = run_demo(options, config, out, firestore_emulator)

    assert invariant.holds, out.getvalue()
    assert invariant.dropped == invariant.exhausted == []
    audit = report["audit"]
    assert {item["finding"]: item["catch_up"] for item in audit["findings"]} == {
        "missed": "completed",
        "released": "completed",
    }
    # Ground truth from the execution log: every run's work, the two caught up
    # included, succeeded exactly once.
    caught_up = {item["run"] for item in audit["findings"]}
    runs = {run["run"]: run for run in report["runs"]}
    assert caught_up <= set(runs)
    assert all(run["successful_executions"] == 1 for run in runs.values())


def test_json_report_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The JSON path is the edge only; the full run is covered above.
    from localrun import demo
    from localrun.demo_invariant import check_invariant

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
