"""The stack config, as the demo uses it: the Scheduler's jobs and the handler's env, compressed.

The jobs, schedules, deadlines, retry policies, headers and the handler's
DEDUP_* settings all come from the stack file (`scheduler_dedup.offline.stack_file`), parsed by the
Pulumi program's own `parse_config`, so the demo runs exactly what `pulumi up` would deploy. Only
durations change: each job's clock runs faster by its own factor, chosen so
its attempt deadline lasts a second or two, and the handler's lease is
scaled to match. Retention is not scaled: the handler judges schedule times
against its real clock, so it is raised, if needed, to cover the window of
past runs the demo replays.

The audit's settings follow the same rule. DEDUP_SCHEDULES carries each job's
schedule and time zone as deployed and its retry window compressed like the
Scheduler's retries, so a replayed run counts as settled seconds after the
simulator gave up on it. The audit's look-back is not compressed: it reaches
back to `simulator.replayed_since`, so it judges exactly the stretch of real
time in which the simulator delivers every fire time of every job.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from dedup_schedule.config.model import ConfigError, ScheduleConfig
from dedup_schedule.config.parser import parse_config
from dedup_schedule.job_ids import handler_job_ids
from runledger.config import (
    DUPLICATE_WAIT_ENV,
    HEARTBEAT_ENV,
    JOBS_MODULE_ENV,
    LEASE_ENV,
    RETENTION_ENV,
)
from runledger.facts import MIN_ATTEMPT_DEADLINE_S, RetryPolicy
from runledger.schedules import LOOKBACK_VARIABLE, schedule_entry, schedules_json
from runledger.schedules import VARIABLE as SCHEDULES_VARIABLE
from scheduler_dedup.localrun.demo_plan import (
    EVENTS_ENV,
    OUTAGE_OVER_ENV,
    OVERLAP_ANSWERED_ENV,
    OWN_JOBS_ENV,
    PLAN_ENV,
)
from scheduler_dedup.localrun.simulator import RunPlan, SimJob
from scheduler_dedup.offline.stack_file import (
    StackFileError,
    choose_stack,
    read_project_name,
    read_stack_values,
    stack_file,
)

# The longest attempt deadline of the stack lasts this long in the demo ...
LONGEST_DEADLINE_S = 2.5
# ... and no job's deadline is shorter than this, so that a loopback round
# trip through the emulator never times out by accident.
SHORTEST_DEADLINE_S = 1.0
# An in-progress duplicate waits for the holder's outcome until this share of the
# shortest compressed attempt deadline: the handler's own bound (a margin of at
# least 2 s before the job's deadline) is in real seconds and would not fit.
DUPLICATE_WAIT_SHARE = 0.8
DEMO_JOBS_MODULE = "scheduler_dedup.localrun.demo_jobs"


class StackError(Exception):
    """The stack cannot be loaded; the message is one line for the user."""


def resolve_stack(stack: str | None, project_dir: Path) -> str:
    """`stack`, or the project's only stack file's name (several: one line listing them)."""
    try:
        return choose_stack(project_dir, stack)
    except StackFileError as exc:
        raise StackError(str(exc)) from None


def load_stack(stack: str, project_dir: Path) -> ScheduleConfig:
    try:
        path = stack_file(project_dir, stack)
        if not path.is_file():
            known = sorted(
                p.name[len("Pulumi.") : -len(".yaml")] for p in path.parent.glob("Pulumi.*.yaml")
            )
            raise StackError(f"unknown stack {stack!r} (stacks here: {', '.join(known) or 'none'})")
        return parse_config(read_stack_values(project_dir, stack), read_project_name(project_dir))
    except (ConfigError, StackFileError) as exc:
        raise StackError(str(exc)) from None


@dataclass(frozen=True)
class OwnJobs:
    """Whether the demo runs the stack's own jobs, and why (not)."""

    module: str | None  # the jobs module the handler would load, when it defines every job
    reason: str


def own_jobs(config: ScheduleConfig, project_dir: Path) -> OwnJobs:
    """The stack's own jobs module when it defines every job id of the stack.

    Its job ids are read as `make plan` reads them (`dedup_schedule.job_ids`: the
    module imported in a child Python, the handler dir first on the path), so a
    module that cannot be imported is the same one-line StackError; a module that
    lacks a job is a reason, and the demo runs its built-in demonstration jobs.
    """
    module = config.handler_env()[JOBS_MODULE_ENV]
    try:
        defined = handler_job_ids(
            handler_dir(config, project_dir),
            module,
            f"{read_project_name(project_dir)}:handlerDir",
            config.handler_dir,
        )
    except (ConfigError, StackFileError) as exc:
        raise StackError(str(exc)) from None
    where = f"{config.handler_dir}/{module.replace('.', '/')}.py"
    missing = [job.id for job in config.jobs if job.id not in defined]
    if missing:
        return OwnJobs(
            None, f"the built-in demonstration jobs ({', '.join(missing)} not defined in {where})"
        )
    return OwnJobs(module, f"your jobs from {where}")


def handler_dir(config: ScheduleConfig, project_dir: Path) -> Path:
    """The handler the stack deploys: its `handlerDir`, relative to the project's Pulumi.yaml."""
    return (project_dir / config.handler_dir).resolve()


def speedups(config: ScheduleConfig) -> dict[str, float]:
    """How many real seconds of each job pass in one demo second."""
    longest = max(job.attempt_deadline_s for job in config.jobs)
    base = longest / LONGEST_DEADLINE_S
    return {job.id: min(base, job.attempt_deadline_s / SHORTEST_DEADLINE_S) for job in config.jobs}


def sim_jobs(config: ScheduleConfig, speedup: dict[str, float]) -> list[SimJob]:
    """Each job as the Scheduler sends it: headers and body from the stack, durations compressed."""
    jobs = []
    for job in config.jobs:
        factor = speedup[job.id]
        retry = job.retry
        jobs.append(
            SimJob(
                id=job.id,
                schedule=job.schedule,
                time_zone=job.time_zone,
                attempt_deadline_s=job.attempt_deadline_s / factor,
                # Every duration scales by the same factor, so each backoff is the
                # deployed one divided by it: the doubling arithmetic is linear.
                retry=RetryPolicy(
                    retry_count=retry.retry_count,
                    max_retry_duration_s=retry.max_retry_duration_s / factor,
                    min_backoff_s=retry.min_backoff_s / factor,
                    max_backoff_s=retry.max_backoff_s / factor,
                    max_doublings=retry.max_doublings,
                ),
                headers=(
                    (config.project_header, config.project),
                    (config.region_header, config.region),
                    ("Content-Type", job.content_type),
                ),
                body=(job.body or "").encode(),
            )
        )
    return jobs


@dataclass(frozen=True)
class HandlerEnv:
    env: dict[str, str]
    notes: tuple[str, ...]  # what differs from the deployed settings, and why


@dataclass(frozen=True)
class DemoFiles:
    """The files the demo shares with its jobs module inside the handler (`demo_plan`)."""

    plan: Path
    events: Path
    outage_over: Path
    overlap_answered: Path | None = (
        None  # None: no overlapping run (`scheduler_dedup.localrun.demo_overlap`)
    )


def schedules_value(
    config: ScheduleConfig,
    speedup: dict[str, float],
    catch_up: bool,
    lookback_s: int,
    overlaps: Mapping[str, str] | None = None,
) -> str:
    """DEDUP_SCHEDULES for the demo: the stack's jobs, retry windows compressed.

    Each job keeps the overlap policy the stack gives it, as the deployed handler
    does; `overlaps` sets a job's policy for the demo's overlapping run on top
    (`scheduler_dedup.localrun.demo_overlap`).

    The handler accepts no attempt deadline under Cloud Scheduler's minimum, and
    no retry window shorter than the deadline, so both are raised to that minimum
    (15 s) where compression takes them below it. With catch-up on, every run in
    the look-back is young enough to be caught up.
    """
    entries = []
    for job in config.jobs:
        factor = speedup[job.id]
        deadline = max(MIN_ATTEMPT_DEADLINE_S, math.ceil(job.attempt_deadline_s / factor))
        entry = schedule_entry(
            job.id,
            job.schedule,
            job.time_zone,
            retry_window_s=max(deadline, math.ceil(job.retry_window_s / factor)),
            attempt_deadline_s=deadline,
            catch_up=True if catch_up else None,
            catch_up_max_age_s=lookback_s if catch_up else None,
            overlap=(overlaps or {}).get(job.id, job.overlap),
            body=job.body,
        )
        entries.append(entry)
    return schedules_json(entries)


def handler_env(
    config: ScheduleConfig,
    speedup: dict[str, float],
    plans: Sequence[RunPlan],
    now: datetime,
    files: DemoFiles,
    *,
    audit_since: datetime,
    catch_up: bool = False,
    own_module: str | None = None,
    overlaps: Mapping[str, str] | None = None,
) -> HandlerEnv:
    """The deployed handler's env: lease compressed, retention widened, the audit's window set.

    `audit_since` is the latest fire time the simulator does not replay; the
    audit looks back to it from `now` (and so, when it runs a little later, to
    a moment just after it).
    """
    env = config.handler_env()
    fastest = max(speedup.values())
    longest_work = max((step.seconds for plan in plans for step in plan.script), default=0.0)
    lease = max(math.ceil(config.lease_seconds / fastest), math.ceil(longest_work + 1))
    lookback = math.floor((now - audit_since).total_seconds())
    oldest = min((plan.schedule_time for plan in plans), default=now)
    window = math.ceil((now - min(oldest, audit_since)).total_seconds()) + 3600
    retention = max(config.retention_seconds, window, lease + 1)
    notes = [
        f"{LEASE_ENV} {config.lease_seconds} -> {lease} "
        f"(compressed; longest demo work {longest_work:.1f} s)",
    ]
    heartbeat = config.heartbeat_seconds
    if heartbeat is not None and heartbeat > lease:
        env.pop(HEARTBEAT_ENV)
        notes.append(
            f"{HEARTBEAT_ENV} {heartbeat} -> unset (the compressed lease, "
            "renewed while the work runs, is the claim's lease)"
        )
    if retention != config.retention_seconds:
        notes.append(
            f"{RETENTION_ENV} {config.retention_seconds} -> {retention} "
            f"(not compressed: the window replays runs up to {window // 3600} h old)"
        )
    shortest = min(job.attempt_deadline_s / speedup[job.id] for job in config.jobs)
    wait = round(shortest * DUPLICATE_WAIT_SHARE, 2)
    notes.append(
        f"{DUPLICATE_WAIT_ENV} unset -> {wait} (a duplicate's wait for the running "
        "attempt's outcome ends inside the shortest compressed deadline)"
    )
    if own_module is None:
        work = "demonstration work, logged per execution"
    else:
        work = f"runs your {own_module} module's jobs, each execution logged, faults injected"
    notes.append(f"{JOBS_MODULE_ENV} jobs -> {DEMO_JOBS_MODULE} ({work})")
    notes.append(
        f"{SCHEDULES_VARIABLE}: the stack's jobs, retry windows compressed (at least "
        f"{MIN_ATTEMPT_DEADLINE_S} s, the least the handler accepts)"
        + ("; catchUp on (--catch-up)" if catch_up else "; catchUp off")
    )
    notes.append(
        f"{LOOKBACK_VARIABLE} {lookback} (the audit judges the {lookback / 3600:.1f} h in which "
        "the simulator delivers every fire time of every job)"
    )
    notes.append(
        "no OIDC token locally (DEDUP_ALLOWED_INVOKERS is added at deploy); one process with "
        "64 threads stands in for the Cloud Run instances"
    )
    env.update(
        {
            LEASE_ENV: str(lease),
            RETENTION_ENV: str(retention),
            JOBS_MODULE_ENV: DEMO_JOBS_MODULE,
            SCHEDULES_VARIABLE: schedules_value(config, speedup, catch_up, lookback, overlaps),
            LOOKBACK_VARIABLE: str(lookback),
            DUPLICATE_WAIT_ENV: str(wait),
            PLAN_ENV: str(files.plan),
            EVENTS_ENV: str(files.events),
            OUTAGE_OVER_ENV: str(files.outage_over),
            **({OWN_JOBS_ENV: own_module} if own_module else {}),
            **(
                {OVERLAP_ANSWERED_ENV: str(files.overlap_answered)}
                if files.overlap_answered
                else {}
            ),
            # One local process stands in for every Cloud Run instance the stack allows.
            "THREADS": "64",
        }
    )
    return HandlerEnv(env, tuple(notes))
