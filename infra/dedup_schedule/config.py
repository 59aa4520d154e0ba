"""Stack configuration for the deduplicated schedule, parsed and checked in pure Python.

Every tool that needs the schedule's settings reads them through `parse_config`:
the Pulumi program (adapting `pulumi.Config`), the offline plan, the local demo
and the policy pack. Keeping this module free of any `pulumi` import is what
lets those tools share one definition of defaults, limits and derived values
(lease and retention), so the deployed handler and the offline checks can never
disagree about them.

Values may arrive structured (a YAML map or list in `Pulumi.<stack>.yaml`) or as
the strings the Pulumi CLI stores (`pulumi config set maxInstances 5`, JSON text
for objects), so scalars are parsed leniently but checked strictly. Every error
is a single `ConfigError` whose message starts with the full key, for example
`scheduler-dedup:jobs[1].schedule: ...`.
"""

from __future__ import annotations

import json
import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PROJECT_NAME = "scheduler-dedup"

# Cloud Scheduler limits for HTTP targets (attemptDeadline, retryConfig).
MIN_ATTEMPT_DEADLINE_S = 15
MAX_ATTEMPT_DEADLINE_S = 30 * 60
MAX_RETRY_COUNT = 5
# Cloud Run functions (2nd gen) HTTP functions allow up to 60 minutes per request.
MAX_REQUEST_TIMEOUT_S = 3600
MAX_INSTANCES_LIMIT = 1000
MAX_CONCURRENCY = 1000

MANUAL_RUN_MODES = ("separate", "reject")

# The subcollection of each run document holding its checkpoints and outputs
# (`runledger.firestore_store.WORK_COLLECTION` in the handler); it gets a TTL policy too.
WORK_COLLECTION = "runledger_work"

# Service-account ids are 6-30 characters and the longest suffix we append is "-invoker";
# with a 30-character project id the source bucket name stays within 63 characters.
_PREFIX = re.compile(r"[a-z][a-z0-9-]{0,20}[a-z0-9]")
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,500}")
_DATABASE_ID = re.compile(r"\(default\)|[a-z][a-z0-9-]{2,61}[a-z0-9]")
_COLLECTION = re.compile(r"[A-Za-z0-9_-]{1,100}")
_HEADER = re.compile(r"[A-Za-z0-9-]{1,100}")
_DURATION = re.compile(r"(\d+)\s*(s|m|h)?")
_MEMORY = re.compile(r"\d+(Mi|Gi|M|G)")
_CPU = re.compile(r"\d+(\.\d+)?")
_RUNTIME = re.compile(r"python3\d{1,2}")
# Cloud Scheduler sets or replaces these itself; a job may not override them.
_RESERVED_HEADERS = frozenset({"host", "content-length", "user-agent", "authorization"})

# This project's own config keys (namespace = project name); Pulumi.yaml documents each.
PROJECT_KEYS = frozenset(
    {
        "jobs",
        "namePrefix",
        "collection",
        "database",
        "requestTimeout",
        "maxInstances",
        "concurrency",
        "cpu",
        "memory",
        "leaseMargin",
        "retentionMargin",
        "projectHeader",
        "regionHeader",
        "manualRuns",
        "handlerDir",
        "handlerRuntime",
    }
)
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
_PROJECT_REF = r"(?P<project>[a-z][a-z0-9-]{4,28}[a-z0-9])"
_LOCATION_REF = r"(?P<location>[a-z]+-[a-z]+\d+)"
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
_DATABASE_KEYS = frozenset(
    {"name", "create", "location", "deletionProtection", "pointInTimeRecovery"}
)


class ConfigError(ValueError):
    """A stack config value is missing or invalid; the message starts with its key."""


@dataclass(frozen=True)
class RetryConfig:
    """Cloud Scheduler `retryConfig`, durations in whole seconds."""

    retry_count: int
    max_retry_duration_s: int
    min_backoff_s: int
    max_backoff_s: int
    max_doublings: int

    def backoff_s(self, retry_index: int) -> int:
        """Wait before retry number `retry_index` (0-based), as Cloud Scheduler schedules it.

        The interval doubles `max_doublings` times, then grows linearly by the last
        doubled interval, and never exceeds `max_backoff_s`.
        """
        if retry_index <= self.max_doublings:
            wait = self.min_backoff_s * 2**retry_index
        else:
            doubled = self.min_backoff_s * 2**self.max_doublings
            wait = doubled * (retry_index - self.max_doublings + 1)
        return min(wait, self.max_backoff_s)


@dataclass(frozen=True)
class TargetConfig:
    """A Google Cloud resource the handler starts once per run (a proxy target).

    The handler learns which target a job uses only from its jobs module
    (`runledger.targets.workflow_target` / `cloud_run_job_target`); this config
    exists so the stack can grant the runtime account the right to start that one
    resource and nothing else.

    kind: "workflow" or "cloudRunJob" (the config key it was given under).
    name: the full resource name, `projects/P/locations/L/workflows/W` or `.../jobs/J`.
    """

    kind: str
    name: str
    project: str
    location: str
    resource_id: str


@dataclass(frozen=True)
class JobConfig:
    """One Cloud Scheduler job; `id` is the short JOB_ID the handler dispatches on."""

    id: str
    schedule: str
    time_zone: str
    description: str
    attempt_deadline_s: int
    body: str | None
    content_type: str
    retry: RetryConfig
    target: TargetConfig | None = None

    @property
    def retry_window_s(self) -> int:
        """Longest time from the first attempt of a run until its last attempt can end.

        With both `retry_count` and `max_retry_duration` set, Cloud Scheduler retries
        until both limits are reached, so the longer of the two bounds the window; a
        retry that starts just before `max_retry_duration` may run a full deadline.
        """
        attempts_and_waits = self.attempt_deadline_s + sum(
            self.retry.backoff_s(i) + self.attempt_deadline_s for i in range(self.retry.retry_count)
        )
        if self.retry.max_retry_duration_s:
            by_duration = self.retry.max_retry_duration_s + self.attempt_deadline_s
            return max(attempts_and_waits, by_duration)
        return attempts_and_waits


@dataclass(frozen=True)
class DatabaseConfig:
    """The Firestore database that holds the run ledger."""

    name: str
    create: bool
    location: str
    deletion_protection: bool
    point_in_time_recovery: bool


@dataclass(frozen=True)
class ScheduleConfig:
    """Everything the stack deploys, validated, with the values derived from it."""

    project: str
    region: str
    jobs: tuple[JobConfig, ...]
    name_prefix: str
    collection: str
    database: DatabaseConfig
    request_timeout_s: int
    max_instances: int
    concurrency: int
    cpu: str
    memory: str
    lease_margin_s: int
    retention_margin_s: int
    project_header: str
    region_header: str
    manual_runs: str
    handler_dir: str
    handler_runtime: str

    @property
    def lease_seconds(self) -> int:
        """How long a claim blocks other deliveries of the same run.

        Cloud Run does not stop a request at its timeout, so the lease covers the
        whole request timeout (which is at least every attempt deadline) plus a margin.
        """
        return self.request_timeout_s + self.lease_margin_s

    @property
    def retention_seconds(self) -> int:
        """How long a run record must survive: past every retry of the slowest job."""
        longest = max(job.retry_window_s for job in self.jobs)
        return max(longest, self.lease_seconds) + self.retention_margin_s

    def handler_env(self) -> dict[str, str]:
        """The handler's static DEDUP_* settings (the invoker allow-list is added at deploy)."""
        return {
            "DEDUP_COLLECTION": self.collection,
            "DEDUP_DATABASE": self.database.name,
            "DEDUP_LEASE_SECONDS": str(self.lease_seconds),
            "DEDUP_RETENTION_SECONDS": str(self.retention_seconds),
            "DEDUP_PROJECT_HEADER": self.project_header,
            "DEDUP_REGION_HEADER": self.region_header,
            "DEDUP_MANUAL_RUNS": self.manual_runs,
            "DEDUP_JOBS_MODULE": "jobs",
            "DEDUP_ALLOWED_PROJECTS": self.project,
            "DEDUP_ALLOWED_REGIONS": self.region,
            "GOOGLE_CLOUD_PROJECT": self.project,
        }


class _Reader:
    """Typed access to one config object, with error messages that name the full key."""

    def __init__(self, values: Mapping[str, Any], path: str, known: frozenset[str]) -> None:
        self.values = values
        self.path = path
        for key in values:
            if key not in known:
                hint = ", ".join(sorted(known))
                raise ConfigError(f"{self.key(key)}: unknown key (known keys: {hint})")

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path.endswith("]") else f"{self.path}{name}"

    def raw(self, name: str) -> Any:
        value = self.values.get(name)
        return None if value == "" else value

    def text(self, name: str, default: str | None, pattern: re.Pattern[str], what: str) -> str:
        value = self.raw(name)
        if value is None:
            if default is None:
                raise ConfigError(f"{self.key(name)}: required, expected {what}")
            value = default
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise ConfigError(f"{self.key(name)}: {value!r} is not {what}")
        return value

    def optional_text(self, name: str) -> str | None:
        value = self.raw(name)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{self.key(name)}: {value!r} is not a string")
        return value

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        value = self.raw(name)
        if value is None:
            return default
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            value = int(value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{self.key(name)}: {value!r} is not a whole number")
        if not low <= value <= high:
            raise ConfigError(f"{self.key(name)}: {value} is outside the allowed {low}..{high}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.raw(name)
        if value is None:
            return default
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        if not isinstance(value, bool):
            raise ConfigError(f"{self.key(name)}: {value!r} is not true or false")
        return value

    def duration(self, name: str, default: int | None) -> int:
        """Whole seconds from '180s', '5m', '1h' or a bare number of seconds."""
        value = self.raw(name)
        if value is None:
            if default is None:
                raise ConfigError(f"{self.key(name)}: required, expected a duration like '180s'")
            return default
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        match = _DURATION.fullmatch(value.strip()) if isinstance(value, str) else None
        if match is None:
            raise ConfigError(
                f"{self.key(name)}: {value!r} is not a duration; use whole seconds, "
                "minutes or hours such as '180s', '5m' or '1h'"
            )
        return int(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2] or "s"]

    def structured(self, name: str, expected: type) -> Any:
        """A map or list, given either structured or as JSON text (as `pulumi config` stores it)."""
        value = self.raw(name)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{self.key(name)}: not valid JSON ({exc.msg})") from None
        if value is not None and not isinstance(value, expected):
            kind = "a list" if expected is list else "an object"
            raise ConfigError(f"{self.key(name)}: expected {kind}, got {value!r}")
        return value


_CRON_FIELDS = (
    # name, low, high, names usable instead of numbers
    ("minute", 0, 59, ""),
    ("hour", 0, 23, ""),
    ("day of month", 1, 31, ""),
    ("month", 1, 12, "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC"),
    ("day of week", 0, 7, "SUN MON TUE WED THU FRI SAT"),
)
# Quartz-only day forms: last day (L, 5L, L-3), nearest weekday (15W, LW).
_QUARTZ = re.compile(r"\d*L(-\d+)?|\d+W|LW")
_GROC_START = re.compile(
    r"(every|\d+(st|nd|rd|th)|first|second|third|fourth|last|[a-z]+day)\b", re.IGNORECASE
)


def _cron_value(token: str, low: int, high: int, names: str, field: str) -> int:
    if token.isdigit():
        number = int(token)
    elif names and token.upper() in names.split():
        number = names.split().index(token.upper()) + (1 if low == 1 else 0)
    else:
        raise ValueError(f"{field} field: {token!r} is not a number")
    if not low <= number <= high:
        raise ValueError(f"{field} field: {number} is outside {low}-{high}")
    return number


def _check_cron_field(text: str, low: int, high: int, names: str, field: str) -> None:
    for part in text.split(","):
        if "?" in part or "#" in part or _QUARTZ.fullmatch(part.upper()):
            raise ValueError(f"{field} field: {text!r} uses Quartz syntax, not unix-cron")
        base, _, step = part.partition("/")
        if step and (not step.isdigit() or int(step) == 0):
            raise ValueError(f"{field} field: step {step!r} is not a positive number")
        if base == "*":
            continue
        start, dash, end = base.partition("-")
        first = _cron_value(start, low, high, names, field)
        if dash and _cron_value(end, low, high, names, field) < first:
            raise ValueError(f"{field} field: range {base!r} runs backwards")


def check_cron(schedule: str) -> None:
    """Raise ValueError unless `schedule` is a 5-field unix-cron expression.

    Cloud Scheduler also accepts the English groc format ("every 5 minutes"), but
    only unix-cron schedules are guaranteed to carry X-CloudScheduler-ScheduleTime,
    which the handler's run key is built from.
    """
    fields = schedule.split()
    if _GROC_START.match(schedule.strip()):
        raise ValueError(
            f"{schedule!r} is groc syntax; Cloud Scheduler only guarantees the "
            "X-CloudScheduler-ScheduleTime header the deduplication relies on for unix-cron, "
            "so write it as 5 fields, e.g. '*/5 * * * *' for every 5 minutes"
        )
    if schedule.strip().startswith("@"):
        raise ValueError(f"{schedule!r}: cron macros are not supported; use 5 fields")
    if len(fields) != len(_CRON_FIELDS):
        raise ValueError(
            f"{schedule!r} has {len(fields)} fields; unix-cron needs 5: "
            "minute hour day-of-month month day-of-week"
        )
    for text, (field, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        _check_cron_field(text, low, high, names, field)


def _time_zone(reader: _Reader, name: str) -> str:
    value = reader.text(name, "UTC", re.compile(r"[A-Za-z0-9_+\-/]+"), "a tz database name")
    zones = zoneinfo.available_timezones()
    known = value in zones if zones else _loads_zone(value)
    if not known:
        raise ConfigError(
            f"{reader.key(name)}: {value!r} is not a tz database time zone "
            "(such as 'UTC', 'Europe/Berlin' or 'America/New_York')"
        )
    return value


def _loads_zone(name: str) -> bool:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return True


def _parse_retry(reader: _Reader, name: str) -> RetryConfig:
    values = reader.structured(name, dict) or {}
    retry = _Reader(values, reader.key(name) + ".", _RETRY_KEYS)
    result = RetryConfig(
        retry_count=retry.integer("retryCount", 0, 0, MAX_RETRY_COUNT),
        max_retry_duration_s=retry.duration("maxRetryDuration", 0),
        min_backoff_s=retry.duration("minBackoffDuration", 5),
        max_backoff_s=retry.duration("maxBackoffDuration", 3600),
        max_doublings=retry.integer("maxDoublings", 5, 0, 16),
    )
    if result.max_backoff_s < result.min_backoff_s:
        raise ConfigError(
            f"{retry.key('maxBackoffDuration')}: {result.max_backoff_s}s is shorter than "
            f"minBackoffDuration {result.min_backoff_s}s"
        )
    return result


def _parse_target(reader: _Reader, name: str) -> TargetConfig | None:
    """`target: {workflow: ...}` or `target: {cloudRunJob: ...}`; None when absent."""
    values = reader.structured(name, dict)
    if values is None:
        return None
    target = _Reader(values, reader.key(name) + ".", _TARGET_KEYS)
    given = [kind for kind in TARGET_KINDS if target.raw(kind) is not None]
    if len(given) != 1:
        problem = "both were given" if given else "neither was given"
        raise ConfigError(
            f"{reader.key(name)}: set exactly one of {' or '.join(TARGET_KINDS)} ({problem})"
        )
    (kind,) = given
    pattern, shape = _TARGET_NAMES[kind]
    resource = target.text(kind, None, re.compile(r".+", re.DOTALL), shape)
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


def _parse_job(values: Any, path: str) -> JobConfig:
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected an object with id and schedule, got {values!r}")
    job = _Reader(values, path, _JOB_KEYS)
    job_id = job.text("id", None, _JOB_ID, "a Cloud Scheduler job id (letters, digits, '-', '_')")
    schedule = job.text("schedule", None, re.compile(r".+", re.DOTALL), "a unix-cron schedule")
    try:
        check_cron(schedule)
    except ValueError as exc:
        raise ConfigError(f"{job.key('schedule')}: {exc}") from None
    deadline = job.duration("attemptDeadline", 180)
    if not MIN_ATTEMPT_DEADLINE_S <= deadline <= MAX_ATTEMPT_DEADLINE_S:
        raise ConfigError(
            f"{job.key('attemptDeadline')}: {deadline}s is outside Cloud Scheduler's "
            f"{MIN_ATTEMPT_DEADLINE_S}s..{MAX_ATTEMPT_DEADLINE_S}s for HTTP targets"
        )
    return JobConfig(
        id=job_id,
        schedule=" ".join(schedule.split()),
        time_zone=_time_zone(job, "timeZone"),
        description=job.optional_text("description") or "",
        attempt_deadline_s=deadline,
        body=job.optional_text("body"),
        content_type=job.optional_text("contentType") or "application/json",
        retry=_parse_retry(job, "retry"),
        target=_parse_target(job, "target"),
    )


def _parse_database(reader: _Reader, region: str) -> DatabaseConfig:
    values = reader.structured("database", dict) or {}
    db = _Reader(values, reader.key("database") + ".", _DATABASE_KEYS)
    return DatabaseConfig(
        name=db.text(
            "name",
            "(default)",
            _DATABASE_ID,
            "a Firestore database id ('(default)' or 4-63 of a-z, 0-9, '-')",
        ),
        create=db.boolean("create", True),
        location=db.text("location", region, re.compile(r"[a-z0-9-]+"), "a Firestore location"),
        deletion_protection=db.boolean("deletionProtection", True),
        point_in_time_recovery=db.boolean("pointInTimeRecovery", False),
    )


def _header(reader: _Reader, name: str, default: str) -> str:
    value = reader.text(name, default, _HEADER, "an HTTP header name (letters, digits, '-')")
    lowered = value.lower()
    if lowered.startswith("x-cloudscheduler") or lowered in _RESERVED_HEADERS:
        raise ConfigError(f"{reader.key(name)}: {value!r} is set by Cloud Scheduler itself")
    return value


def _collection(reader: _Reader) -> str:
    value = reader.text(
        "collection", "scheduler_runs", _COLLECTION, "a collection id (letters, digits, _ -)"
    )
    if value == WORK_COLLECTION:
        # Both TTL policies would then configure the same collection group and field.
        raise ConfigError(
            f"{reader.key('collection')}: {value!r} is the handler's checkpoint/output "
            "subcollection; choose another name for the run ledger"
        )
    return value


def parse_config(values: Mapping[str, Any], project_name: str = PROJECT_NAME) -> ScheduleConfig:
    """Validate a stack's config map and return the schedule it describes.

    `values` is the `config:` map of a `Pulumi.<stack>.yaml` (keys with their
    namespace, e.g. `gcp:project`, `scheduler-dedup:jobs`); `project_name` is the
    namespace of this project's own keys. Raises `ConfigError` naming the key.
    """
    # Other gcp: keys (zone, credentials, ...) configure the provider, not this program.
    platform_keys = frozenset({"project", "region"})
    gcp = {key[4:]: values[key] for key in values if key[4:] in platform_keys and key[:4] == "gcp:"}
    platform = _Reader(gcp, "gcp:", platform_keys)
    project = platform.text(
        "project", None, re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]"), "a Google Cloud project id"
    )
    region = platform.text("region", None, re.compile(r"[a-z]+-[a-z]+\d+"), "a Google Cloud region")

    prefix = f"{project_name}:"
    own = {key[len(prefix) :]: value for key, value in values.items() if key.startswith(prefix)}
    reader = _Reader(own, prefix, PROJECT_KEYS)

    raw_jobs = reader.structured("jobs", list)
    if not raw_jobs:
        raise ConfigError(f"{reader.key('jobs')}: required, a list of at least one job")
    jobs = tuple(_parse_job(job, f"{reader.key('jobs')}[{i}]") for i, job in enumerate(raw_jobs))
    seen: set[str] = set()
    for i, job in enumerate(jobs):
        if job.id in seen:
            raise ConfigError(f"{reader.key('jobs')}[{i}].id: {job.id!r} is used by another job")
        seen.add(job.id)

    longest_deadline = max(job.attempt_deadline_s for job in jobs)
    request_timeout = reader.duration("requestTimeout", longest_deadline)
    if not longest_deadline <= request_timeout <= MAX_REQUEST_TIMEOUT_S:
        raise ConfigError(
            f"{reader.key('requestTimeout')}: {request_timeout}s must be at least the largest "
            f"attemptDeadline ({longest_deadline}s) and at most {MAX_REQUEST_TIMEOUT_S}s"
        )

    concurrency = reader.integer("concurrency", 1, 1, MAX_CONCURRENCY)
    cpu = reader.text("cpu", "1", _CPU, "a number of CPUs such as '1' or '0.5'")
    if concurrency > 1 and float(cpu) < 1:
        raise ConfigError(
            f"{reader.key('concurrency')}: {concurrency} concurrent requests need cpu >= 1 "
            f"(got {cpu})"
        )

    project_header = _header(reader, "projectHeader", "X-Dedup-Project")
    region_header = _header(reader, "regionHeader", "X-Dedup-Region")
    if project_header.lower() == region_header.lower():
        raise ConfigError(f"{reader.key('regionHeader')}: must differ from projectHeader")

    name_prefix = reader.text(
        "namePrefix",
        "dedup",
        _PREFIX,
        "a name prefix of 2-22 lowercase letters, digits or '-', starting with a letter",
    )

    return ScheduleConfig(
        project=project,
        region=region,
        jobs=jobs,
        name_prefix=name_prefix,
        collection=_collection(reader),
        database=_parse_database(reader, region),
        request_timeout_s=request_timeout,
        max_instances=reader.integer("maxInstances", 3, 1, MAX_INSTANCES_LIMIT),
        concurrency=concurrency,
        cpu=cpu,
        memory=reader.text("memory", "512Mi", _MEMORY, "a memory size such as '512Mi' or '1Gi'"),
        lease_margin_s=reader.duration("leaseMargin", 60),
        retention_margin_s=reader.duration("retentionMargin", 86400),
        project_header=project_header,
        region_header=region_header,
        manual_runs=reader.text(
            "manualRuns",
            "separate",
            re.compile("|".join(MANUAL_RUN_MODES)),
            f"one of {', '.join(MANUAL_RUN_MODES)}",
        ),
        handler_dir=reader.text(
            "handlerDir", "handler", re.compile(r"[^\0]+"), "a directory relative to Pulumi.yaml"
        ),
        handler_runtime=reader.text(
            "handlerRuntime", "python312", _RUNTIME, "a Cloud Run functions Python runtime id"
        ),
    )


def read_project_name(project_dir: Path) -> str:
    """The `name:` of the Pulumi project in `project_dir` (the namespace of its own keys)."""
    project_file = Path(project_dir) / "Pulumi.yaml"
    try:
        document = yaml.safe_load(project_file.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError(f"{project_file}: cannot read ({exc.strerror})") from None
    name = document.get("name") if isinstance(document, dict) else None
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{project_file}: has no project name")
    return name


def read_stack_values(project_dir: Path, stack: str) -> dict[str, Any]:
    """The raw `config:` map of `Pulumi.<stack>.yaml` in `project_dir`."""
    stack_file = Path(project_dir) / f"Pulumi.{stack}.yaml"
    try:
        document = yaml.safe_load(stack_file.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError(f"{stack_file}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{stack_file}: not valid YAML ({exc})") from None
    config = document.get("config", {}) if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise ConfigError(f"{stack_file}: 'config' must be a map")
    return config


def load_stack_config(project_dir: Path, stack: str) -> ScheduleConfig:
    """Parse `Pulumi.<stack>.yaml` in `project_dir` without the Pulumi CLI (offline tools)."""
    return parse_config(read_stack_values(project_dir, stack), read_project_name(project_dir))
