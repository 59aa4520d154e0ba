"""`parse_config`: a stack's config map in, a validated `ScheduleConfig` out.

The Pulumi program passes what `pulumi.Config` reads, the offline tools what
`offline.stack_file` reads from `Pulumi.<stack>.yaml`; both go through this
one parser, so defaults, limits and derived values cannot differ between them.
Every error is a `ConfigError` whose message starts with the full key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dedup_schedule.config import (
    ConfigError,
    DatabaseConfig,
    JobConfig,
    ScheduleConfig,
    TargetConfig,
)
from dedup_schedule.config_audit import check_audit, parse_alerts, parse_audit, parse_catch_up
from dedup_schedule.config_values import ConfigValues
from dedup_schedule.firestore_locations import FIRESTORE_LOCATIONS
from runledger import facts

PROJECT_NAME = "scheduler-dedup"

# Cloud Run functions (2nd gen) HTTP functions allow up to 60 minutes per request.
MAX_REQUEST_TIMEOUT_S = 3600
MAX_INSTANCES_LIMIT = 1000
MAX_CONCURRENCY = 1000

# Service-account ids are 6-30 characters and the longest suffix we append is "-invoker";
# with a 30-character project id the source bucket name stays within 63 characters.
_PREFIX = re.compile(r"[a-z][a-z0-9-]{0,20}[a-z0-9]")
_PROJECT_ID = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")
_REGION = re.compile(r"[a-z]+-[a-z]+\d+")
_ANY_TEXT = re.compile(r".+", re.DOTALL)
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
        "ingress",
        "audit",
        "alerts",
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
        "catchUp",
        "catchUpMaxAge",
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
_PROJECT_REF = rf"(?P<project>{_PROJECT_ID.pattern})"
_LOCATION_REF = rf"(?P<location>{_REGION.pattern})"
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
# Cloud Scheduler's own RetryConfig defaults, for the keys a job leaves out.
_RETRY_DEFAULTS = facts.RetryPolicy()


def _parse_retry(reader: ConfigValues, name: str) -> facts.RetryPolicy:
    values = reader.structured(name, dict) or {}
    retry = ConfigValues(values, reader.key(name) + ".", _RETRY_KEYS)
    result = facts.RetryPolicy(
        retry_count=retry.integer(
            "retryCount", _RETRY_DEFAULTS.retry_count, 0, facts.MAX_RETRY_COUNT
        ),
        max_retry_duration_s=retry.duration(
            "maxRetryDuration", int(_RETRY_DEFAULTS.max_retry_duration_s)
        ),
        min_backoff_s=retry.duration("minBackoffDuration", int(_RETRY_DEFAULTS.min_backoff_s)),
        max_backoff_s=retry.duration("maxBackoffDuration", int(_RETRY_DEFAULTS.max_backoff_s)),
        max_doublings=retry.integer(
            "maxDoublings", _RETRY_DEFAULTS.max_doublings, 0, facts.MAX_DOUBLINGS
        ),
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
    resource = target.text(kind, None, _ANY_TEXT, shape)
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
    job = ConfigValues(values, path, _JOB_KEYS)
    job_id = job.text(
        "id", None, facts.JOB_ID, "a Cloud Scheduler job id (letters, digits, '-', '_')"
    )
    schedule = job.text("schedule", None, _ANY_TEXT, "a unix-cron schedule")
    problem = facts.unix_cron_problem(schedule)
    if problem:
        raise ConfigError(f"{job.key('schedule')}: {problem}")
    deadline = job.duration("attemptDeadline", facts.DEFAULT_ATTEMPT_DEADLINE_S)
    if not facts.MIN_ATTEMPT_DEADLINE_S <= deadline <= facts.MAX_ATTEMPT_DEADLINE_S:
        raise ConfigError(
            f"{job.key('attemptDeadline')}: {deadline}s is outside Cloud Scheduler's "
            f"{facts.MIN_ATTEMPT_DEADLINE_S}s..{facts.MAX_ATTEMPT_DEADLINE_S}s for HTTP targets"
        )
    catch_up, catch_up_max_age = parse_catch_up(job)
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
    )


def _parse_jobs(reader: ConfigValues) -> tuple[JobConfig, ...]:
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


def _parse_database(reader: ConfigValues, region: str) -> DatabaseConfig:
    values = reader.structured("database", dict) or {}
    db = ConfigValues(values, reader.key("database") + ".", _DATABASE_KEYS)
    return DatabaseConfig(
        name=db.text(
            "name",
            facts.DEFAULT_DATABASE,
            facts.is_database_id,
            f"a Firestore database id ({facts.DATABASE_ID_RULE})",
        ),
        create=db.boolean("create", True),
        location=_database_location(db, region),
        deletion_protection=db.boolean("deletionProtection", True),
        point_in_time_recovery=db.boolean("pointInTimeRecovery", False),
    )


def _database_location(db: ConfigValues, region: str) -> str:
    """`database.location`, default the region, checked against Firestore's locations."""
    location = db.text("location", region, re.compile(r"[a-z0-9-]+"), "a Firestore location")
    if location not in FIRESTORE_LOCATIONS:
        given = "" if db.raw("location") is not None else f" (the default: gcp:region {region})"
        raise ConfigError(
            f"{db.key('location')}: {location!r}{given} is not a location Firestore offers; "
            "set database.location to a multi-region (nam5, nam7, eur3) or a Firestore "
            "region near gcp:region, e.g. us-central1 or europe-west1"
        )
    return location


def _header(reader: ConfigValues, name: str, default: str) -> str:
    value = reader.text(
        name, default, facts.HEADER_NAME, "an HTTP header name (letters, digits, '-')"
    )
    lowered = value.lower()
    if lowered.startswith("x-cloudscheduler") or lowered in _RESERVED_HEADERS:
        raise ConfigError(f"{reader.key(name)}: {value!r} is set by Cloud Scheduler itself")
    return value


def _collection(reader: ConfigValues) -> str:
    value = reader.text(
        "collection",
        facts.DEFAULT_COLLECTION,
        facts.COLLECTION_ID,
        "a collection id (letters, digits, _ -)",
    )
    if value == facts.WORK_COLLECTION:
        # Both TTL policies would then configure the same collection group and field.
        raise ConfigError(
            f"{reader.key('collection')}: {value!r} is the handler's checkpoint/output "
            "subcollection; choose another name for the run ledger"
        )
    return value


def _request_timeout(reader: ConfigValues, jobs: tuple[JobConfig, ...]) -> int:
    longest_deadline = max(job.attempt_deadline_s for job in jobs)
    request_timeout = reader.duration("requestTimeout", longest_deadline)
    if not longest_deadline <= request_timeout <= MAX_REQUEST_TIMEOUT_S:
        raise ConfigError(
            f"{reader.key('requestTimeout')}: {request_timeout}s must be at least the largest "
            f"attemptDeadline ({longest_deadline}s) and at most {MAX_REQUEST_TIMEOUT_S}s"
        )
    return request_timeout


def parse_config(values: Mapping[str, Any], project_name: str = PROJECT_NAME) -> ScheduleConfig:
    """Validate a stack's config map and return the schedule it describes.

    `values` is the `config:` map of a `Pulumi.<stack>.yaml` (keys with their
    namespace, e.g. `gcp:project`, `scheduler-dedup:jobs`); `project_name` is the
    namespace of this project's own keys. Raises `ConfigError` naming the key.
    """
    # Other gcp: keys (zone, credentials, ...) configure the provider, not this program.
    platform_keys = frozenset({"project", "region"})
    gcp = {key[4:]: values[key] for key in values if key[4:] in platform_keys and key[:4] == "gcp:"}
    platform = ConfigValues(gcp, "gcp:", platform_keys)
    project = platform.text("project", None, _PROJECT_ID, "a Google Cloud project id")
    region = platform.text("region", None, _REGION, "a Google Cloud region")

    prefix = f"{project_name}:"
    own = {key[len(prefix) :]: value for key, value in values.items() if key.startswith(prefix)}
    reader = ConfigValues(own, prefix, PROJECT_KEYS)
    jobs = _parse_jobs(reader)
    request_timeout = _request_timeout(reader, jobs)

    concurrency = reader.integer("concurrency", 1, 1, MAX_CONCURRENCY)
    cpu = reader.text("cpu", "1", _CPU, "a number of CPUs such as '1' or '0.5'")
    if concurrency > 1 and float(cpu) < 1:
        raise ConfigError(
            f"{reader.key('concurrency')}: {concurrency} concurrent requests need cpu >= 1 "
            f"(got {cpu})"
        )

    project_header = _header(reader, "projectHeader", facts.DEFAULT_PROJECT_HEADER)
    region_header = _header(reader, "regionHeader", facts.DEFAULT_REGION_HEADER)
    if project_header.lower() == region_header.lower():
        raise ConfigError(f"{reader.key('regionHeader')}: must differ from projectHeader")

    name_prefix = reader.text(
        "namePrefix",
        "dedup",
        _PREFIX,
        "a name prefix of 2-22 lowercase letters, digits or '-', starting with a letter",
    )

    config = ScheduleConfig(
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
            re.compile("|".join(facts.MANUAL_RUN_MODES)),
            f"one of {', '.join(facts.MANUAL_RUN_MODES)}",
        ),
        handler_dir=reader.text(
            "handlerDir", "handler", re.compile(r"[^\0]+"), "a directory relative to Pulumi.yaml"
        ),
        handler_runtime=reader.text(
            "handlerRuntime", "python312", _RUNTIME, "a Cloud Run functions Python runtime id"
        ),
        ingress=reader.text(
            "ingress",
            "internal-only",
            re.compile("internal-only|internal-and-gclb|all"),
            "one of internal-only, internal-and-gclb, all",
        ),
        audit=parse_audit(reader),
        alerts=parse_alerts(reader),
    )
    check_audit(config, reader, reader.key("jobs"))
    return config
