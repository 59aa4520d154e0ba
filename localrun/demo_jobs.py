"""The demo's JOBS module: work that takes realistic time and sometimes fails retryably.

The handler imports it by name (DEDUP_JOBS_MODULE=localrun.demo_jobs). It
registers one job per job id of the stack (listed in the plan file the
simulator wrote), looks up how long this execution of the run takes and
whether it fails, and logs every execution's start and end to the execution
log. That log is the demo's ground truth: the invariant counts executions
there, not in the ledger the handler keeps.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from localrun.demo_plan import (
    EVENTS_ENV,
    OUTAGE_OVER_ENV,
    PLAN_ENV,
    WARMUP_JOB,
    ExecutionEvent,
    WorkPlan,
    append_event,
    count_starts,
    read_events,
    read_plan,
    run_label,
)
from runledger import Jobs, RunContext
from runledger.exceptions import LeaseLost

# Long work checks its lease this often, as real jobs should between steps.
_LEASE_CHECK_S = 0.1


class DemoRetryableError(RuntimeError):
    """A failure a retry can fix (a flaky downstream): the handler releases the run."""


def _paths() -> tuple[Path, Path, Path]:
    try:
        return (
            Path(os.environ[PLAN_ENV]),
            Path(os.environ[EVENTS_ENV]),
            Path(os.environ[OUTAGE_OVER_ENV]),
        )
    except KeyError as exc:
        raise RuntimeError(f"localrun.demo_jobs needs {exc.args[0]}; run it via make demo") from exc


def _work(plan: WorkPlan, events_path: Path, outage_over: Path, ctx: RunContext) -> None:
    label = run_label(ctx.job_name, ctx.schedule_time, ctx.manual)
    # Which execution of this run is this one? Counted in the log, not the ledger.
    index = count_starts(read_events(events_path), label)
    step = plan.step(label, index)

    def log(event: str, outcome: str | None) -> None:
        append_event(
            events_path, ExecutionEvent(label, ctx.attempt_id, event, outcome, time.time())
        )

    log("start", None)
    deadline = time.monotonic() + step.seconds
    try:
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, _LEASE_CHECK_S))
            ctx.ensure_lease()
    except LeaseLost:
        log("end", "lease_lost")
        raise
    if step.fails and not outage_over.exists():
        log("end", "failed_retryable")
        raise DemoRetryableError(f"{label}: downstream unavailable (execution {index + 1})")
    log("end", "succeeded")


def _build() -> Jobs:
    plan_path, events_path, outage_over = _paths()
    plan = read_plan(plan_path)
    jobs = Jobs()
    for job_id in plan.jobs:
        jobs.job(job_id)(lambda ctx, _plan=plan: _work(_plan, events_path, outage_over, ctx))
    jobs.job(WARMUP_JOB)(lambda ctx: None)
    return jobs


JOBS = _build()
