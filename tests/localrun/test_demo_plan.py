"""The plan and execution-log files shared by the simulator and the demo jobs."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from scheduler_dedup.localrun.demo_plan import (
    ExecutionEvent,
    Step,
    WorkPlan,
    append_event,
    count_starts,
    read_events,
    read_plan,
    run_label,
    write_plan,
)


def test_a_run_has_one_label_whatever_offset_its_time_came_with() -> None:
    utc = datetime(2026, 11, 28, 1, 30, tzinfo=UTC)
    new_york = utc.astimezone(timezone(timedelta(hours=-5)))
    assert run_label("nightly-report", utc, False) == run_label("nightly-report", new_york, False)
    assert run_label("nightly-report", utc, False) == "nightly-report@2026-11-28T01:30:00Z"
    assert run_label("nightly-report", utc, True).endswith("/manual")


def test_plan_round_trips_and_the_last_step_repeats(tmp_path: Path) -> None:
    plan = WorkPlan(
        jobs=("a", "b"),
        scripts={"a@x": (Step(0.1, fails=True), Step(0.2))},
        default=Step(0.05),
    )
    write_plan(tmp_path / "plan.json", plan)
    loaded = read_plan(tmp_path / "plan.json")
    assert loaded == plan
    assert [loaded.step("a@x", n) for n in range(3)] == [Step(0.1, True), Step(0.2), Step(0.2)]
    assert loaded.step("unknown", 0) == Step(0.05)


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    log = tmp_path / "executions.log"

    def write(worker: int) -> None:
        for n in range(200):
            append_event(log, ExecutionEvent(f"run-{worker}", f"a{n}", "start", None, float(n)))

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events = read_events(log)
    assert len(events) == 1600
    assert all(count_starts(events, f"run-{w}") == 200 for w in range(8))
