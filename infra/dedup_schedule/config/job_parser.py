"""The `jobs` part of the stack config: each job's schedule, deadline, retries, target, overlap
and active window.

`parser.parse_config` calls `parse_jobs`; every error is a `ConfigError`
naming the full key (`scheduler-dedup:jobs[1].retry.maxDoublings: ...`).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from dedup_schedule.config.model import ConfigError, JobConfig, TargetConfig
from dedup_schedule.config.values import ANY_TEXT, PROJECT_ID, REGION, ConfigValues, did_you_mean
from runledger import facts, schedules

_JOB_KEYS = frozenset(
    {
        "id",
        "schedule",
        "timeZone",
        "description",
        "attemptDeadline",
        "body",
        "contentType",
        "retry",
        "target",
        "catchUp",
        "catchUpMaxAge",
        "paused",
        "overlap",
        "startAt",
        "endAt",
        "suspendAfterFailures",
    }
)
# A proxy target names exactly one Google Cloud resource the handler starts per run.
TARGET_KINDS = ("workflow", "cloudRunJob")
_TARGET_KEYS = frozenset(TARGET_KINDS)
# Project ids (not numbers: the grants are made in, and IAM conditions compare against,
# the project id), regions, and the resource ids each API accepts: a workflow
# id is 1-64 letters, digits, '-' or '_' starting with a letter and ending with a letter
# or digit; a Cloud Run job name is 1-63 lowercase letters, digits or '-', starting
# with a letter and not ending with '-'.
_PROJECT_REF = rf"(?P<project>{PROJECT_ID.pattern})"
_LOCATION_REF = rf"(?P<location>{REGION.pattern})"
_TARGET_NAMES = {
    "workflow": (
        re.compile(
            rf"projects/{_PROJECT_REF}/locations/{_LOCATION_REF}/workflows/"
            r"(?P<id>[A-Za-z](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9])?)"
        ),
        "projects/PROJECT_ID/locations/REGION/workflows/WORKFLOW",
    ),
    "cloudRunJob": (
        re.compile(
            rf"projects/{_PROJECT_REF}/locations/{_LOCATION_REF}/jobs/"
            r"(?P<id>[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?)"
        ),
        "projects/PROJECT_ID/locations/REGION/jobs/JOB",
    ),
}
_RETRY_KEYS = frozenset(
    {"retryCount", "maxRetryDuration", "minBackoffDuration", "maxBackoffDuration", "maxDoublings"}
)
# Cloud Scheduler's own RetryConfig defaults, for the keys a job leaves out.
_RETRY_DEFAULTS = facts.RetryPolicy()


def _parse_retry(reader: ConfigValues, name: str) -> facts.RetryPolicy:
    values = reader.structured(name, dict) or {}
    retry = ConfigValues(values, reader.key(name) + ".", _RETRY_KEYS)
    doublings = retry.integer("maxDoublings", _RETRY_DEFAULTS.max_doublings, 0, facts.MAX_DOUBLINGS)
    if doublings == facts.DROPPED_MAX_DOUBLINGS:  # see facts: the provider never sends it
        raise ConfigError(
            f"{retry.key('maxDoublings')}: 0 never reaches Cloud Scheduler (the provider drops "
            "a zero retry field), which then doubles 5 times; set 1 to 16, or leave it out for 5"
        )
    result = facts.RetryPolicy(
        retry_count=retry.integer(
            "retryCount", _RETRY_DEFAULTS.retry_count, 0, facts.MAX_RETRY_COUNT
        ),
        max_retry_duration_s=retry.duration(
            "maxRetryDuration", int(_RETRY_DEFAULTS.max_retry_duration_s)
        ),
        min_backoff_s=retry.duration("minBackoffDuration", int(_RETRY_DEFAULTS.min_backoff_s)),
        max_backoff_s=retry.duration("maxBackoffDuration", int(_RETRY_DEFAULTS.max_backoff_s)),
        max_doublings=doublings,
    )
    if result.max_backoff_s < result.min_backoff_s:
        raise ConfigError(
            f"{retry.key('maxBackoffDuration')}: {result.max_backoff_s}s is shorter than "
            f"minBackoffDuration {result.min_backoff_s}s"
        )
    return result


def _parse_target(reader: ConfigValues, name: str) -> TargetConfig | None:
    """`target: {workflow: ...}` or `target: {cloudRunJob: ...}`; None when absent."""
    values = reader.structured(name, dict)
    if values is None:
        return None
    target = ConfigValues(values, reader.key(name) + ".", _TARGET_KEYS)
    given = [kind for kind in TARGET_KINDS if target.raw(kind) is not None]
    if len(given) != 1:
        problem = "both were given" if given else "neither was given"
        raise ConfigError(
            f"{reader.key(name)}: set exactly one of {' or '.join(TARGET_KINDS)} ({problem})"
        )
    (kind,) = given
    pattern, shape = _TARGET_NAMES[kind]
    resource = target.text(kind, None, ANY_TEXT, shape)
    match = pattern.fullmatch(resource)
    if match is None:
        raise ConfigError(f"{target.key(kind)}: {resource!r} is not a resource name like {shape}")
    return TargetConfig(
        kind=kind,
        name=resource,
        project=match["project"],
        location=match["location"],
        resource_id=match["id"],
    )


def _parse_catch_up(job: ConfigValues) -> tuple[bool, int]:
    """A job's `catchUp` (default false) and `catchUpMaxAge` (default 1 hour)."""
    max_age = job.duration("catchUpMaxAge", int(schedules.DEFAULT_CATCH_UP_MAX_AGE.total_seconds()))
    if max_age < 1:
        raise ConfigError(f"{job.key('catchUpMaxAge')}: must be at least 1s")
    return job.boolean("catchUp", False), max_age


def _parse_overlap(job: ConfigValues) -> str:
    """`overlap`: one of `facts.OVERLAP_POLICIES`, `allow` when absent.

    The handler reads it from the job's DEDUP_SCHEDULES entry (`runledger.ledger.overlap`
    says what each policy does); an unknown value is refused here, naming the key,
    so a typo never deploys a job that silently overlaps.
    """
    value = job.raw("overlap")
    if value is None:
        return facts.OVERLAP_ALLOW
    if not isinstance(value, str) or value not in facts.OVERLAP_POLICIES:
        choices = ", ".join(facts.OVERLAP_POLICIES)
        hint = did_you_mean(value, facts.OVERLAP_POLICIES) if isinstance(value, str) else ""
        raise ConfigError(f"{job.key('overlap')}: {value!r} is not one of {choices}{hint}")
    return value


def _parse_window(job: ConfigValues) -> tuple[datetime | None, datetime | None]:
    """`startAt`/`endAt`: the job's active window, RFC 3339 with an offset, each optional.

    The handler reads them from the job's DEDUP_SCHEDULES entry (`runledger.schedules`):
    outside the window a time is never expected and never run. A window that cannot
    hold a single time (endAt at or before startAt) is refused here, naming the key.
    """
    bounds: dict[str, datetime | None] = {}
    for name in ("startAt", "endAt"):
        value = job.raw(name)
        try:
            bounds[name] = None if value is None else schedules.window_instant(value)
        except ValueError as exc:
            quote = " (quote it: the Pulumi CLI rewrites an unquoted date)" * (
                isinstance(value, str) and " " in value
            )
            raise ConfigError(f"{job.key(name)}: {exc}{quote}") from None
    problem = schedules.window_problem(bounds["startAt"], bounds["endAt"])
    if problem:
        raise ConfigError(f"{job.key('endAt')}: {problem}: the job would never run")
    return bounds["startAt"], bounds["endAt"]


def _parse_suspend_after(job: ConfigValues) -> int | None:
    """`suspendAfterFailures`: suspend the job after this many scheduled runs in a row failed
    for good (`runledger.ledger.suspension`); None (off) when absent."""
    if job.raw("suspendAfterFailures") is None:
        return None
    return job.integer("suspendAfterFailures", 0, 1, schedules.MAX_SUSPEND_AFTER)


def _parse_job(values: Any, path: str) -> JobConfig:
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected an object with id and schedule, got {values!r}")
    job = ConfigValues(values, path, _JOB_KEYS)
    job_id = job.text(
        "id", None, facts.JOB_ID, "a Cloud Scheduler job id (letters, digits, '-', '_')"
    )
    schedule = job.text("schedule", None, ANY_TEXT, "a unix-cron schedule")
    problem = facts.schedule_problem(schedule)
    if problem:
        raise ConfigError(f"{job.key('schedule')}: {problem}")
    deadline = job.duration("attemptDeadline", facts.DEFAULT_ATTEMPT_DEADLINE_S)
    if not facts.MIN_ATTEMPT_DEADLINE_S <= deadline <= facts.MAX_ATTEMPT_DEADLINE_S:
        raise ConfigError(
            f"{job.key('attemptDeadline')}: {deadline}s is outside Cloud Scheduler's "
            f"{facts.MIN_ATTEMPT_DEADLINE_S}s..{facts.MAX_ATTEMPT_DEADLINE_S}s for HTTP targets"
        )
    catch_up, catch_up_max_age = _parse_catch_up(job)
    start_at, end_at = _parse_window(job)
    return JobConfig(
        id=job_id,
        schedule=" ".join(schedule.split()),
        time_zone=job.time_zone("timeZone"),
        description=job.optional_text("description") or "",
        attempt_deadline_s=deadline,
        body=job.optional_text("body"),
        content_type=job.optional_text("contentType") or "application/json",
        retry=_parse_retry(job, "retry"),
        target=_parse_target(job, "target"),
        catch_up=catch_up,
        catch_up_max_age_s=catch_up_max_age,
        paused=job.boolean("paused", False),
        overlap=_parse_overlap(job),
        start_at=start_at,
        end_at=end_at,
        suspend_after_failures=_parse_suspend_after(job),
    )


def parse_jobs(reader: ConfigValues) -> tuple[JobConfig, ...]:
    """The `jobs` list: at least one job, ids unique (each names a Scheduler job)."""
    raw_jobs = reader.structured("jobs", list)
    if not raw_jobs:
        raise ConfigError(f"{reader.key('jobs')}: required, a list of at least one job")
    jobs = tuple(_parse_job(job, f"{reader.key('jobs')}[{i}]") for i, job in enumerate(raw_jobs))
    seen: set[str] = set()
    for i, job in enumerate(jobs):
        if job.id in seen:
            raise ConfigError(f"{reader.key('jobs')}[{i}].id: {job.id!r} is used by another job")
        seen.add(job.id)
    return jobs
