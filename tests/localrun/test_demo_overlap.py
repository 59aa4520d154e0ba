"""The demo's overlap skip and backfill: chosen, sent in order, judged, and shown in the report."""

from __future__ import annotations

import io
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runledger.facts import RetryPolicy
from scheduler_dedup.localrun.demo import run_demo
from scheduler_dedup.localrun.demo_invariant import check_invariant
from scheduler_dedup.localrun.demo_overlap import (
    Gate,
    Overlap,
    choose_backfill,
    choose_overlap,
    overlap_problems,
    with_overlap,
)
from scheduler_dedup.localrun.demo_plan import ExecutionEvent, Step, append_event
from scheduler_dedup.localrun.simulator import Delivery, Fault, RunPlan, RunResult, Seen, SimJob
from tests.localrun.demo_project import DEMO_NOW, DEMO_OPTIONS, demo_stack

NOW = datetime(2026, 12, 1, 23, 30, tzinfo=UTC)
JOB = SimJob("sync", "5 * * * *", "UTC", 1.0, RetryPolicy(), (), b"")


def _plan(hour: int, fault: Fault | None = None) -> RunPlan:
    return RunPlan("sync", datetime(2026, 12, 1, hour, 5, tzinfo=UTC), False, fault, (Step(0.1),))


def _answered(plan: RunPlan, outcome: str) -> RunResult:
    delivery = Delivery(plan.label, plan.job, 0, Seen.ANSWERED, 200, outcome, 0.01, None)
    return RunResult(plan, [delivery], acknowledged=True)


def _ran(label: str, attempt: str) -> list[ExecutionEvent]:
    return [
        ExecutionEvent(label, attempt, "start", None, 1.0),
        ExecutionEvent(label, attempt, "end", "succeeded", 2.0),
    ]


def test_the_pair_is_two_consecutive_runs_without_a_work_fault_the_second_judged() -> None:
    plans = [_plan(h, f) for h, f in ((19, None), (20, Fault.FAILURE), (21, None), (22, None))]
    overlap = choose_overlap(plans, [JOB], NOW, 4, paused=None, allowed=["sync"])
    assert overlap is not None
    assert (overlap.holder.label, overlap.skipped.label) == (plans[2].label, plans[3].label)
    assert choose_overlap(plans, [JOB], NOW, 4, paused="sync", allowed=["sync"]) is None
    # A job whose policy the demo may not set (the team's, without overlap: skip) never skips.
    assert choose_overlap(plans, [JOB], NOW, 4, paused=None, allowed=[]) is None
    timeouts = [_plan(h, Fault.TIMEOUT) for h in (21, 22)]
    assert choose_overlap(timeouts, [JOB], NOW, 2, paused=None, allowed=["sync"]) is None
    held = with_overlap(plans, overlap, JOB)
    assert held[2].script == (Step(0.8, holds=True),)
    assert held[3].script == plans[3].script


def test_a_skipped_run_is_deliberately_not_run_and_a_backfill_must_run_once() -> None:
    holder, skipped, silent = _plan(21), _plan(22), _plan(23)
    results = [
        _answered(holder, "completed"),
        _answered(skipped, "overlap_skipped"),
        _answered(silent, "completed"),
    ]
    backfill = ("sync@2026-12-01T15:05:00Z", "sync")
    events = _ran(holder.label, "h") + _ran(backfill[0], "b")
    invariant = check_invariant(results, events, [backfill])
    assert invariant.skipped == [skipped.label]
    # Acknowledged without work and without a skip answer: still a lost run.
    assert invariant.violations == [
        f"{silent.label}: lost: no successful execution (acknowledged, retries not exhausted)"
    ]
    assert [v.successes for v in invariant.backfills] == [1]
    assert invariant.strays == ()
    twice = check_invariant(results[:2], events + _ran(backfill[0], "c"), [backfill])
    assert twice.violations == [
        f"{backfill[0]}: backfilled, but its work succeeded 2 times (must be exactly once)"
    ]
    never = check_invariant(results[:2], _ran(holder.label, "h"), [backfill])
    assert not never.holds
    # A skipped run that also executed is no skip: it ran.
    ran = check_invariant(results[:2], events + _ran(skipped.label, "s"), [backfill])
    assert ran.skipped == [] and ran.holds
    overlap = Overlap("sync", holder, skipped)
    assert overlap_problems(overlap, invariant, {"skipped": 1}) == []
    assert overlap_problems(overlap, ran, {"skipped": 0}) == [
        f"{skipped.label}: overlap: skip and {holder.label} was running, but it was not skipped"
    ]
    assert "counts 0 skipped" in overlap_problems(overlap, invariant, {"skipped": 0})[0]


def test_the_gate_sends_the_skipped_run_once_the_holder_started_and_the_next_after_both(
    tmp_path: Path,
) -> None:
    earlier, holder, skipped, later = _plan(20), _plan(21), _plan(22), _plan(23)
    events, answered = tmp_path / "events", tmp_path / "answered"
    gate = Gate(
        Overlap("sync", holder, skipped), [earlier, holder, skipped, later], events, answered
    )
    stop = threading.Event()
    sent: list[str] = []

    def send(plan: RunPlan) -> threading.Thread:
        def run() -> None:
            gate.before(plan, stop)
            sent.append(plan.label)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    threads = [send(plan) for plan in (later, skipped, holder)]
    time.sleep(0.3)
    assert sent == []  # all wait for the earlier run
    gate.after(earlier)
    threads[2].join(60)
    time.sleep(0.3)
    assert sent == [holder.label]  # the skipped run waits for the holder's start
    append_event(events, ExecutionEvent(holder.label, "h", "start", None, time.time()))
    threads[1].join(60)
    assert sent == [holder.label, skipped.label]
    gate.after(skipped)
    assert answered.exists()  # the holder's work may end
    time.sleep(0.3)
    assert len(sent) == 2  # the later run waits for the holder to end
    gate.after(holder)
    threads[0].join(60)
    assert sent[-1] == later.label
    stop.set()


@pytest.mark.firestore
def test_make_demo_shows_one_overlap_skip_and_one_backfill_and_counts_them(
    firestore_emulator,
) -> None:
    config = demo_stack()
    firestore_emulator.clear(config.database.name, project=config.project)
    out = io.StringIO()
    invariant, report = run_demo(
        DEMO_OPTIONS(runs=8), config, out, firestore_emulator, now=DEMO_NOW
    )
    text = out.getvalue()
    assert invariant.holds, text
    (skipped,) = invariant.skipped
    (backfilled,) = invariant.backfills
    assert backfilled.successes == 1
    runs = {run["run"]: run for run in report["runs"]}
    assert runs[skipped]["successful_executions"] == runs[skipped]["failed_executions"] == 0
    assert "overlap_skipped" in {d["outcome"] for d in runs[skipped]["deliveries"]}
    assert backfilled.label not in runs  # never delivered by the Scheduler
    summary = report["audit"]["summary"]
    assert summary["skipped"] == 1
    assert (summary["backfill"]["ran"], summary["backfill"]["outcomes"]) == (1, {"completed": 1})
    assert report["audit"]["accounts_for_every_run"], text
    findings = {item["run"] for item in report["audit"]["findings"]}
    assert skipped not in findings and backfilled.label not in findings
    assert report["invariant"]["skipped"] == [skipped]
    assert "1 overlap skip deliberately not run; 1 backfilled time ran once" in report["verdict"]
    assert f"deliberately not run (overlap: skip): {skipped}" in text
    # The built-in work may carry a skip the stack does not set, and the demo says so.
    job = skipped.split("@")[0]
    assert (
        f'overlap: {job} runs with "overlap: skip" for the built-in demonstration work '
        "(the stack says allow)"
    ) in text
    assert "python -m runledger.ops backfill --job" in text
    assert datetime.fromisoformat(backfilled.label.split("@")[1].replace("Z", "+00:00")) < (
        DEMO_NOW - timedelta(hours=1)
    )


def test_the_backfilled_time_is_the_latest_not_replayed_within_the_retained_window() -> None:
    daily = SimJob("daily", "0 3 * * *", "UTC", 1.0, RetryPolicy(), (), b"")
    plans = [_plan(h) for h in (20, 21, 22, 23)]
    plans.append(RunPlan("daily", datetime(2026, 12, 1, 3, tzinfo=UTC), False, None, ()))
    chosen = choose_backfill(plans, [JOB, daily], NOW, 4, paused=None)
    assert chosen is not None
    assert (chosen.job, chosen.schedule_time) == ("sync", datetime(2026, 12, 1, 19, 5, tzinfo=UTC))
    # With the frequent job paused, the daily job's time before its replay is older than
    # anything the demo's retention covers: no backfill rather than a refused one.
    assert choose_backfill(plans, [JOB, daily], NOW, 1, paused="sync") is None
    # A backfill hands the job the body its deliveries carry: such a job is chosen too.
    with_body = SimJob("sync", "5 * * * *", "UTC", 1.0, RetryPolicy(), (), b"purge")
    assert choose_backfill(plans, [with_body], NOW, 4, paused=None) == chosen
