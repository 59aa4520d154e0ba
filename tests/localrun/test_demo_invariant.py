"""The invariant judges the execution log: doubled, lost or overlapping work fails the demo."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler_dedup.localrun import demo
from scheduler_dedup.localrun.demo_invariant import Invariant, check_invariant
from scheduler_dedup.localrun.demo_plan import ExecutionEvent
from scheduler_dedup.localrun.simulator import Fault, RunPlan, RunResult
from tests.localrun.demo_project import DEMO_ARGS

WHEN = datetime(2026, 11, 28, 1, 30, tzinfo=UTC)


def _result(acknowledged: bool = True, exhausted: bool = False) -> RunResult:
    plan = RunPlan("nightly-report", WHEN, False, Fault.FAILURE, ())
    return RunResult(plan, [], acknowledged, exhausted)


LABEL = _result().plan.label


def _execution(attempt: str, start: float, end: float, outcome: str) -> list[ExecutionEvent]:
    return [
        ExecutionEvent(LABEL, attempt, "start", None, start),
        ExecutionEvent(LABEL, attempt, "end", outcome, end),
    ]


def test_failures_then_one_success_holds() -> None:
    events = _execution("a1", 0.0, 1.0, "failed_retryable") + _execution(
        "a2", 2.0, 3.0, "succeeded"
    )
    invariant = check_invariant([_result()], events)
    assert invariant.holds
    verdict = invariant.verdicts[0]
    assert (verdict.successes, verdict.failures, verdict.executions) == (1, 1, 2)


def test_work_done_twice_is_a_violation() -> None:
    events = _execution("a1", 0.0, 1.0, "succeeded") + _execution("a2", 2.0, 3.0, "succeeded")
    invariant = check_invariant([_result()], events)
    assert not invariant.holds
    assert "succeeded 2 times" in invariant.violations[0]


def test_acknowledged_without_work_is_a_lost_run() -> None:
    invariant = check_invariant([_result(acknowledged=True)], [])
    assert not invariant.holds
    assert "lost" in invariant.violations[0]


def test_exhausted_retries_are_reported_not_hidden_and_not_a_violation() -> None:
    events = _execution("a1", 0.0, 1.0, "failed_retryable")
    invariant = check_invariant([_result(acknowledged=False, exhausted=True)], events)
    assert invariant.holds
    assert invariant.exhausted == [LABEL]


def test_overlapping_executions_are_a_violation_even_if_one_failed() -> None:
    events = _execution("a1", 0.0, 2.0, "failed_retryable") + _execution(
        "a2", 1.0, 3.0, "succeeded"
    )
    invariant = check_invariant([_result()], events)
    assert not invariant.holds
    assert "same time" in invariant.violations[0]


def test_an_execution_that_never_ended_is_a_violation() -> None:
    events = [
        *_execution("a1", 0.0, 1.0, "succeeded"),
        ExecutionEvent(LABEL, "a2", "start", None, 2.0),
    ]
    assert not check_invariant([_result()], events).holds


def test_work_for_a_run_never_delivered_is_a_violation() -> None:
    stray = ExecutionEvent("hourly-sync@2026-11-28T01:05:00Z", "x", "start", None, 0.0)
    invariant = check_invariant([], [stray])
    assert invariant.violations == [
        "hourly-sync@2026-11-28T01:05:00Z: executed but never delivered"
    ]


@pytest.mark.parametrize(("holds", "code"), [(True, 0), (False, 1)])
def test_the_command_exit_code_follows_the_invariant(
    monkeypatch: pytest.MonkeyPatch, holds: bool, code: int
) -> None:
    events = _execution("a1", 0.0, 1.0, "succeeded")
    if not holds:
        events += _execution("a2", 2.0, 3.0, "succeeded")
    invariant: Invariant = check_invariant([_result()], events)
    monkeypatch.setattr(demo, "run_demo", lambda *args, **kwargs: (invariant, {"verdict": "v"}))
    assert demo.main(["--runs", "2", *DEMO_ARGS]) == code
