"""DEDUP_SCHEDULES and the audit's other settings, read and checked once at start-up.

`DEDUP_SCHEDULES` is a stable contract (the Pulumi program writes it, checks
outside the repo read it): a JSON list with one object per Cloud Scheduler job,

    {"id": "nightly-report", "schedule": "0 2 * * *", "timeZone": "Europe/Berlin",
     "retryWindowSeconds": 540, "attemptDeadlineSeconds": 180,
     "catchUp": false, "catchUpMaxAgeSeconds": 3600, "paused": false, "overlap": "skip"}

`id`, `schedule`, `timeZone` and `retryWindowSeconds` are required;
`attemptDeadlineSeconds` defaults to Cloud Scheduler's 180 s, `catchUp` to
false, `catchUpMaxAgeSeconds` to one hour and `paused` (the stack created the
Scheduler job paused: its times are neither judged nor caught up) to false,
`overlap` (`runledger.ledger.overlap`: allow, skip or delay) to allow.
`startAt` and `endAt` (RFC 3339 with an offset, both optional) bound the job's
active window: a time outside it is never expected by the audit and, if
delivered, answered `outside_window` and not run (`JobSchedule.in_window`).
`suspendAfterFailures` (1 to 1000, optional) suspends the job after that many
scheduled runs in a row failed for good (`runledger.ledger.suspension`).
Unknown keys are refused, so a typo cannot silently switch a feature off.
Unset or empty means no schedules: the audit then has nothing to check.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from runledger.config import (
    ALLOWED_PROJECTS_ENV,
    ALLOWED_REGIONS_ENV,
    MAX_SETTING_S,
    Settings,
    positive_seconds,
)
from runledger.exceptions import ConfigError
from runledger.facts import (
    DEFAULT_ATTEMPT_DEADLINE_S,
    JOB_ID,
    MAX_ATTEMPT_DEADLINE_S,
    MIN_ATTEMPT_DEADLINE_S,
    OVERLAP_ALLOW,
    OVERLAP_POLICIES,
    schedule_problem,
)

VARIABLE = "DEDUP_SCHEDULES"
LOOKBACK_VARIABLE = "DEDUP_AUDIT_LOOKBACK_SECONDS"
# DEDUP_AUDIT_JOB (a stable name): the job id the stack's audit Scheduler job delivers
# under. Scheduler job ids are unique per project and location, so each stack names
# its audit job from its own prefix and tells the handler here. The handler serves
# that id itself, so no user job and no DEDUP_SCHEDULES entry may take it.
AUDIT_JOB_VARIABLE = "DEDUP_AUDIT_JOB"
# The audit's job id when DEDUP_AUDIT_JOB is unset.
AUDIT_JOB_ID = "runledger-audit"
DEFAULT_LOOKBACK = timedelta(hours=6)
DEFAULT_CATCH_UP_MAX_AGE = timedelta(hours=1)
_REQUIRED = ("id", "schedule", "timeZone", "retryWindowSeconds")
_OPTIONAL = (
    "attemptDeadlineSeconds",
    "catchUp",
    "catchUpMaxAgeSeconds",
    "paused",
    "overlap",
    "body",
    "startAt",
    "endAt",
    "suspendAfterFailures",
)
# The most consecutive failures a job may wait for before it is suspended.
MAX_SUSPEND_AFTER = 1000
# A window bound: RFC 3339 with its UTC offset (`Z` or +HH:MM), so it names one instant
# whatever the job's time zone, never a wall time a daylight-saving change moves.
_INSTANT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})")


def window_instant(value: object) -> datetime:
    """A `startAt`/`endAt` value as an aware datetime; ValueError (saying what is wanted) if not."""
    if not isinstance(value, str) or not _INSTANT.fullmatch(value):
        raise ValueError(f"{value!r} is not an RFC 3339 time with an offset (2026-05-01T00:00:00Z)")
    text = re.sub(r"(\.\d{6})\d+", r"\1", value)  # fromisoformat takes at most microseconds
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{value!r} is not a valid date and time") from None


def window_problem(start_at: datetime | None, end_at: datetime | None) -> str | None:
    """Why a window cannot hold a single time, or None: it must end after it starts."""
    if start_at is not None and end_at is not None and end_at <= start_at:
        return f"endAt {end_at.isoformat()} is not after startAt {start_at.isoformat()}"
    return None


@dataclass(frozen=True)
class JobSchedule:
    """One job's schedule and the timing the audit judges its runs by."""

    id: str
    schedule: str
    time_zone: str
    retry_window: timedelta
    attempt_deadline: timedelta
    catch_up: bool
    catch_up_max_age: timedelta
    paused: bool = False
    overlap: str = OVERLAP_ALLOW
    # The body the Scheduler job sends (its `body` in stack config), for the runs the
    # handler starts itself: a catch-up or a backfill reaches the job as a delivery would.
    body: str | None = None
    # The active window (`startAt`/`endAt`, inclusive): None is open on that side.
    start_at: datetime | None = None
    end_at: datetime | None = None
    # `suspendAfterFailures`: None, no suspension (nor a read of one on each delivery).
    suspend_after: int | None = None

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    @property
    def windowed(self) -> bool:
        return self.start_at is not None or self.end_at is not None

    def in_window(self, instant: datetime) -> bool:
        """Whether a time (the run's schedule time) falls in the job's active window.

        Both ends count as inside (Temporal's spec start and end times do too).
        A wall time a daylight-saving change repeats is judged by its first
        instant, the one its run is keyed by (`delivery.identify.wall_time_instant`).
        """
        return (self.start_at is None or self.start_at <= instant) and (
            self.end_at is None or instant <= self.end_at
        )


@dataclass(frozen=True)
class AuditSettings:
    """What the audit needs beyond `Settings`: the schedules, its window, the run-key scope.

    A run's key hashes the project and region its delivery carried (see
    `delivery.run_key`), or the key region of a stack in several regions
    (DEDUP_KEY_REGION). The stack serves exactly one project and one key region and
    says so in DEDUP_ALLOWED_PROJECTS / DEDUP_ALLOWED_REGIONS (or DEDUP_KEY_REGION),
    so the audit takes them from there and can compute every expected run's key
    without a query.
    """

    schedules: tuple[JobSchedule, ...]
    lookback: timedelta
    project: str
    region: str
    # The job id the audit is delivered under (DEDUP_AUDIT_JOB).
    job: str = AUDIT_JOB_ID
    # Every region whose Scheduler sends the schedule (DEDUP_REGIONS), `region` (the
    # key region) first; empty: `region` alone.
    regions: tuple[str, ...] = ()

    @property
    def scheduler_regions(self) -> tuple[str, ...]:
        """The regions whose Scheduler the audit lists, the key region first."""
        return self.regions or (self.region,)

    def schedule(self, job_id: str) -> JobSchedule | None:
        return next((s for s in self.schedules if s.id == job_id), None)


def _where(index: int, entry: Mapping[str, Any]) -> str:
    job = entry.get("id")
    return f"{VARIABLE}[{index}]" + (f" ({job!r})" if isinstance(job, str) else "")


def _seconds(where: str, name: str, value: Any, low: float, high: float | None = None) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ConfigError(f"{where}: {name} {value!r} is not a number of seconds")
    if value < low or (high is not None and value > high):
        bound = f"at least {low:g}" if high is None else f"{low:g} to {high:g}"
        raise ConfigError(f"{where}: {name} {value!r} must be {bound} seconds")
    if value > MAX_SETTING_S:
        raise ConfigError(f"{where}: {name} {value!r} must be at most {MAX_SETTING_S} seconds")
    return timedelta(seconds=value)


def _entry(index: int, entry: Any, audit_job: str) -> JobSchedule:
    if not isinstance(entry, dict):
        raise ConfigError(f"{VARIABLE}[{index}]: each entry must be a JSON object")
    where = _where(index, entry)
    unknown = sorted(set(entry) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        allowed = ", ".join(_REQUIRED + _OPTIONAL)
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {allowed}")
    missing = [key for key in _REQUIRED if key not in entry]
    if missing:
        raise ConfigError(f"{where}: missing {', '.join(missing)}")
    job = entry["id"]
    if not isinstance(job, str) or not JOB_ID.fullmatch(job):
        raise ConfigError(f"{where}: id {job!r} is not a Cloud Scheduler job id")
    if job == audit_job:
        raise ConfigError(f"{where}: id {audit_job!r} is reserved for the audit itself")
    schedule = entry["schedule"]
    problem = schedule_problem(schedule) if isinstance(schedule, str) else "not a string"
    if problem:
        raise ConfigError(f"{where}: schedule {problem}")
    time_zone = entry["timeZone"]
    try:
        ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ConfigError(f"{where}: timeZone {time_zone!r} is not a tz database name") from None
    deadline = _seconds(
        where,
        "attemptDeadlineSeconds",
        entry.get("attemptDeadlineSeconds", DEFAULT_ATTEMPT_DEADLINE_S),
        MIN_ATTEMPT_DEADLINE_S,
        MAX_ATTEMPT_DEADLINE_S,
    )
    # The first attempt alone may take a full deadline, so no window is shorter.
    window = _seconds(
        where, "retryWindowSeconds", entry["retryWindowSeconds"], deadline.total_seconds()
    )
    catch_up = entry.get("catchUp", False)
    if not isinstance(catch_up, bool):
        raise ConfigError(f"{where}: catchUp {catch_up!r} is not true or false")
    max_age = _seconds(
        where,
        "catchUpMaxAgeSeconds",
        entry.get("catchUpMaxAgeSeconds", DEFAULT_CATCH_UP_MAX_AGE.total_seconds()),
        1,
    )
    paused = entry.get("paused", False)
    if not isinstance(paused, bool):
        raise ConfigError(f"{where}: paused {paused!r} is not true or false")
    overlap = entry.get("overlap", OVERLAP_ALLOW)
    if overlap not in OVERLAP_POLICIES:
        raise ConfigError(
            f"{where}: overlap {overlap!r} is not one of {', '.join(OVERLAP_POLICIES)}"
        )
    body = entry.get("body")
    if body is not None and not isinstance(body, str):
        raise ConfigError(f"{where}: body {body!r} is not a string")
    bounds: dict[str, datetime | None] = {}
    for name in ("startAt", "endAt"):
        try:
            bounds[name] = None if name not in entry else window_instant(entry[name])
        except ValueError as exc:
            raise ConfigError(f"{where}: {name} {exc}") from None
    problem = window_problem(bounds["startAt"], bounds["endAt"])
    if problem:
        raise ConfigError(f"{where}: {problem}")
    suspend_after = entry.get("suspendAfterFailures")
    if suspend_after is not None and (
        isinstance(suspend_after, bool)
        or not isinstance(suspend_after, int)
        or not 1 <= suspend_after <= MAX_SUSPEND_AFTER
    ):
        raise ConfigError(
            f"{where}: suspendAfterFailures {suspend_after!r} is not a whole number "
            f"from 1 to {MAX_SUSPEND_AFTER}"
        )
    return JobSchedule(
        job,
        schedule,
        time_zone,
        window,
        deadline,
        catch_up,
        max_age,
        paused,
        overlap,
        body,
        bounds["startAt"],
        bounds["endAt"],
        suspend_after,
    )


def schedule_entry(
    job_id: str,
    schedule: str,
    time_zone: str,
    *,
    retry_window_s: float,
    attempt_deadline_s: int,
    catch_up: bool | None = None,
    catch_up_max_age_s: int | None = None,
    paused: bool = False,
    overlap: str = OVERLAP_ALLOW,
    body: str | None = None,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
    suspend_after: int | None = None,
) -> dict[str, object]:
    """One job's entry of DEDUP_SCHEDULES, as `parse_schedules` reads it: its one builder.

    The retry window is written in whole seconds, rounded up, so the audit
    never judges a run too early. `catch_up`/`catch_up_max_age_s` left None are
    left out (the parser's defaults apply); `paused` is written only when set,
    `overlap` only when not allow, `body` only when the job sends one and each
    window bound and `suspendAfterFailures` only when set, so every other entry stays as it was.
    """
    entry: dict[str, object] = {
        "id": job_id,
        "schedule": schedule,
        "timeZone": time_zone,
        "retryWindowSeconds": math.ceil(retry_window_s),
        "attemptDeadlineSeconds": attempt_deadline_s,
    }
    if catch_up is not None:
        entry["catchUp"] = catch_up
    if catch_up_max_age_s is not None:
        entry["catchUpMaxAgeSeconds"] = catch_up_max_age_s
    if paused:
        entry["paused"] = True
    if overlap != OVERLAP_ALLOW:
        entry["overlap"] = overlap
    if body is not None:
        entry["body"] = body
    if start_at is not None:
        entry["startAt"] = start_at.isoformat()
    if end_at is not None:
        entry["endAt"] = end_at.isoformat()
    if suspend_after is not None:
        entry["suspendAfterFailures"] = suspend_after
    return entry


def schedules_json(entries: Sequence[Mapping[str, object]]) -> str:
    """The DEDUP_SCHEDULES value of `entries` (each from `schedule_entry`), compact JSON."""
    return json.dumps(list(entries), separators=(",", ":"))


def audit_env(entries: Sequence[Mapping[str, object]], lookback_s: int, job: str) -> dict[str, str]:
    """The audit's settings as the environment `audit_settings` reads: their one writer."""
    return {
        VARIABLE: schedules_json(entries),
        LOOKBACK_VARIABLE: str(lookback_s),
        AUDIT_JOB_VARIABLE: job,
    }


def audit_job_id(env: Mapping[str, str]) -> str:
    """DEDUP_AUDIT_JOB: the audit's Scheduler job id, `AUDIT_JOB_ID` when unset or empty."""
    value = env.get(AUDIT_JOB_VARIABLE, "").strip() or AUDIT_JOB_ID
    if not JOB_ID.fullmatch(value):
        raise ConfigError(f"{AUDIT_JOB_VARIABLE}: {value!r} is not a Cloud Scheduler job id")
    return value


def parse_schedules(raw: str, audit_job: str = AUDIT_JOB_ID) -> tuple[JobSchedule, ...]:
    """The entries of a DEDUP_SCHEDULES value; ConfigError naming the entry if one is wrong.

    audit_job: the audit's job id, which no entry may take.
    """
    if not raw.strip():
        return ()
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"{VARIABLE}: not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise ConfigError(f"{VARIABLE}: must be a JSON list of job objects")
    schedules = tuple(_entry(index, entry, audit_job) for index, entry in enumerate(data))
    seen: set[str] = set()
    for schedule in schedules:
        if schedule.id in seen:
            raise ConfigError(f"{VARIABLE}: job {schedule.id!r} is listed twice")
        seen.add(schedule.id)
    return schedules


def _only(settings_names: frozenset[str], variable: str) -> str:
    if len(settings_names) != 1:
        shown = ", ".join(sorted(settings_names)) or "unset"
        raise ConfigError(
            f"{VARIABLE}: the audit computes run keys for the one project and region this "
            f"handler serves; set {variable} to exactly one value (now: {shown})"
        )
    return next(iter(settings_names))


def audit_settings(env: Mapping[str, str], settings: Settings) -> AuditSettings:
    """Read DEDUP_SCHEDULES, DEDUP_AUDIT_LOOKBACK_SECONDS and DEDUP_AUDIT_JOB against the
    handler's settings."""
    job = audit_job_id(env)
    schedules = parse_schedules(env.get(VARIABLE, ""), job)
    # Past the retention a record may be gone, and its run would read as missed: the
    # default stays inside it, a value set explicitly must.
    lookback = min(DEFAULT_LOOKBACK, settings.retention - settings.lease)
    raw = env.get(LOOKBACK_VARIABLE, "").strip()
    if raw:
        lookback = positive_seconds(LOOKBACK_VARIABLE, raw)
        if lookback >= settings.retention:
            raise ConfigError(f"{LOOKBACK_VARIABLE}: must be shorter than DEDUP_RETENTION_SECONDS")
    # A catch-up claim must land while the record it writes is still retained.
    for schedule in schedules:
        if schedule.catch_up and schedule.catch_up_max_age + settings.lease >= settings.retention:
            raise ConfigError(
                f"{VARIABLE} ({schedule.id!r}): catchUpMaxAgeSeconds plus the lease must be "
                "shorter than DEDUP_RETENTION_SECONDS"
            )
    if not schedules:
        return AuditSettings((), lookback, "", "", job)
    project = _only(settings.allowed_projects, ALLOWED_PROJECTS_ENV)
    if settings.key_region is None:
        region = _only(settings.allowed_regions, ALLOWED_REGIONS_ENV)
        return AuditSettings(schedules, lookback, project, region, job)
    # Several regions: keys hash the key region; the audit lists every region's Scheduler.
    others = sorted(settings.regions - {settings.key_region})
    regions = (settings.key_region, *others)
    return AuditSettings(schedules, lookback, project, settings.key_region, job, regions)


def check_jobs(audit: AuditSettings, jobs: Mapping[str, object], jobs_module: str) -> None:
    """Fail at start-up, naming the job, instead of a 404 on every delivery and missed runs."""
    if audit.job in jobs:
        raise ConfigError(
            f"DEDUP_JOBS_MODULE: {jobs_module}.JOBS defines {audit.job!r}, "
            "a job id reserved for the audit; rename that job"
        )
    for schedule in audit.schedules:
        if schedule.id not in jobs:
            raise ConfigError(
                f"{VARIABLE}: job {schedule.id!r} is not defined in {jobs_module}.JOBS; "
                "every delivery of it would be refused"
            )
