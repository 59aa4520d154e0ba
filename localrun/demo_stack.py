"""The stack config, as the demo uses it: the Scheduler's jobs and the handler's env, compressed.

The jobs, schedules, deadlines, retry policies, headers and the handler's
DEDUP_* settings all come from the stack file (`offline.stack_file`), parsed by the
Pulumi program's own `parse_config`, so the demo runs exactly what `pulumi up` would deploy. Only
durations change: each job's clock runs faster by its own factor, chosen so
its attempt deadline lasts a second or two, and the handler's lease is
scaled to match. Retention is not scaled: the handler judges schedule times
against its real clock, so it is raised, if needed, to cover the window of
past runs the demo replays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from dedup_schedule.config import ConfigError, ScheduleConfig
from dedup_schedule.config_reader import parse_config
from localrun.demo_plan import EVENTS_ENV, PLAN_ENV
from localrun.simulator import RunPlan, SimJob
from offline.stack_file import StackFileError, read_project_name, read_stack_values, stack_file
from runledger.facts import RetryPolicy

REPO_ROOT = Path(__file__).resolve().parent.parent

# The longest attempt deadline of the stack lasts this long in the demo ...
LONGEST_DEADLINE_S = 2.5
# ... and no job's deadline is shorter than this, so that a loopback round
# trip through the emulator never times out by accident.
SHORTEST_DEADLINE_S = 1.0
# An in-progress duplicate waits for the holder's outcome until this share of the
# shortest compressed attempt deadline: the handler's own bound (a margin of at
# least 2 s before the job's deadline) is in real seconds and would not fit.
DUPLICATE_WAIT_SHARE = 0.8
DEMO_JOBS_MODULE = "localrun.demo_jobs"


class StackError(Exception):
    """The stack cannot be loaded; the message is one line for the user."""


def load_stack(stack: str, project_dir: Path = REPO_ROOT) -> ScheduleConfig:
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


def handler_env(
    config: ScheduleConfig,
    speedup: dict[str, float],
    plans: Sequence[RunPlan],
    now: datetime,
    plan_path: Path,
    events_path: Path,
) -> HandlerEnv:
    """The deployed handler's env, with the lease compressed and the retention widened."""
    env = config.handler_env()
    fastest = max(speedup.values())
    longest_work = max((step.seconds for plan in plans for step in plan.script), default=0.0)
    lease = max(math.ceil(config.lease_seconds / fastest), math.ceil(longest_work + 1))
    oldest = min((plan.schedule_time for plan in plans), default=now)
    window = math.ceil((now - oldest).total_seconds()) + 3600
    retention = max(config.retention_seconds, window, lease + 1)
    notes = [
        f"DEDUP_LEASE_SECONDS {config.lease_seconds} -> {lease} "
        f"(compressed; longest demo work {longest_work:.1f} s)",
    ]
    if retention != config.retention_seconds:
        notes.append(
            f"DEDUP_RETENTION_SECONDS {config.retention_seconds} -> {retention} "
            f"(not compressed: the window replays runs up to {window // 3600} h old)"
        )
    shortest = min(job.attempt_deadline_s / speedup[job.id] for job in config.jobs)
    wait = round(shortest * DUPLICATE_WAIT_SHARE, 2)
    notes.append(
        f"DEDUP_DUPLICATE_WAIT_SECONDS unset -> {wait} (a duplicate's wait for the running "
        "attempt's outcome ends inside the shortest compressed deadline)"
    )
    notes.append(f"DEDUP_JOBS_MODULE jobs -> {DEMO_JOBS_MODULE} (demo work, logged per execution)")
    notes.append(
        "no OIDC token locally (DEDUP_ALLOWED_INVOKERS is added at deploy); one process with "
        "64 threads stands in for the Cloud Run instances"
    )
    env.update(
        {
            "DEDUP_LEASE_SECONDS": str(lease),
            "DEDUP_RETENTION_SECONDS": str(retention),
            "DEDUP_JOBS_MODULE": DEMO_JOBS_MODULE,
            "DEDUP_DUPLICATE_WAIT_SECONDS": str(wait),
            PLAN_ENV: str(plan_path),
            EVENTS_ENV: str(events_path),
            # One local process stands in for every Cloud Run instance the stack allows.
            "THREADS": "64",
        }
    )
    return HandlerEnv(env, tuple(notes))
