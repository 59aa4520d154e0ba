"""The demo's JOBS module: work that takes realistic time and sometimes fails retryably.

The handler imports it by name (DEDUP_JOBS_MODULE=scheduler_dedup.localrun.demo_jobs). It
registers one job per job id of the stack (listed in the plan file the
simulator wrote), looks up how long this execution of the run takes and
whether it fails, and logs every execution's start and end to the execution
log. That log is the demo's ground truth: the invariant counts executions
there, not in the ledger the handler keeps.

When the demo runs the stack's own jobs (the default when the stack's job ids
are all defined in handler/jobs.py), OWN_JOBS_ENV names that module: after the
planned duration and the injected failure, each execution calls the team's
function with the run's context, so its log lines, checkpoints and outputs are
the team's own, and an execution that succeeds is one that ran the team's code.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from runledger import Jobs, RunContext
from runledger.exceptions import LeaseLost
from runledger.sdk.registry import JobFn, load_jobs
from scheduler_dedup.localrun.demo_plan import (
    EVENTS_ENV,
    JOB_RAISED,
    OUTAGE_OVER_ENV,
    OVERLAP_ANSWERED_ENV,
    OWN_JOBS_ENV,
    PLAN_ENV,
    WARMUP_JOB,
    DemoRetryableError,
    ExecutionEvent,
    WorkPlan,
    append_event,
    count_starts,
    read_events,
    read_plan,
    run_label,
)

# Long work checks its lease this often, as real jobs should between steps.
_LEASE_CHECK_S = 0.1
# A holding step looks this often whether the run it waits for was answered.
_HOLD_CHECK_S = 0.02


def _paths() -> tuple[Path, Path, Path]:
    try:
        return (
            Path(os.environ[PLAN_ENV]),
            Path(os.environ[EVENTS_ENV]),
            Path(os.environ[OUTAGE_OVER_ENV]),
        )
    except KeyError as exc:
        raise RuntimeError(
            f"scheduler_dedup.localrun.demo_jobs needs {exc.args[0]}; run it via make demo"
        ) from exc


def _work(
    plan: WorkPlan,
    events_path: Path,
    outage_over: Path,
    ctx: RunContext,
    own: JobFn | None,
    answered: Path | None,
) -> None:
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
    holding = step.holds and answered is not None
    try:
        while (left := deadline - time.monotonic()) > 0:
            if holding and answered is not None and answered.exists():
                break
            time.sleep(min(left, _HOLD_CHECK_S if holding else _LEASE_CHECK_S))
            ctx.ensure_lease()
    except LeaseLost:
        log("end", "lease_lost")
        raise
    if step.fails and not outage_over.exists():
        log("end", "failed_retryable")
        raise DemoRetryableError(f"{label}: downstream unavailable (execution {index + 1})")
    if own is not None:
        try:
            own(ctx)
        except Exception:  # the handler answers it (422 terminal, else 500) and logs the error
            log("end", JOB_RAISED)
            raise
    log("end", "succeeded")


def _build() -> Jobs:
    plan_path, events_path, outage_over = _paths()
    plan = read_plan(plan_path)
    own_module = os.environ.get(OWN_JOBS_ENV)
    own = load_jobs(own_module, OWN_JOBS_ENV) if own_module else {}
    answered = (
        Path(os.environ[OVERLAP_ANSWERED_ENV]) if OVERLAP_ANSWERED_ENV in os.environ else None
    )
    jobs = Jobs()
    for job_id in plan.jobs:
        fn = own.get(job_id)
        jobs.job(job_id)(
            lambda ctx, _fn=fn: _work(plan, events_path, outage_over, ctx, _fn, answered)
        )
    jobs.job(WARMUP_JOB)(lambda ctx: None)
    return jobs


JOBS = _build()
