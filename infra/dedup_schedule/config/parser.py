"""`parse_config`: a stack's config map in, a validated `ScheduleConfig` out.

The Pulumi program passes what `pulumi.Config` reads, the offline tools what
`scheduler_dedup.offline.stack_file` reads from `Pulumi.<stack>.yaml`; both go through this
one parser, so defaults, limits and derived values cannot differ between them.
Every error is a `ConfigError` whose message starts with the full key.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from dedup_schedule.config.audit_parser import check_audit, parse_alerts, parse_audit
from dedup_schedule.config.job_parser import parse_jobs
from dedup_schedule.config.model import ConfigError, DatabaseConfig, JobConfig, ScheduleConfig
from dedup_schedule.config.values import PROJECT_ID, REGION, ConfigValues
from dedup_schedule.firestore_locations import (
    FIRESTORE_LOCATIONS,
    REGIONS,
    regional_database_problem,
)
from runledger import facts
from runledger.config import DEAD_LETTER_TOPIC

PROJECT_NAME = "scheduler-dedup"

# Cloud Run functions (2nd gen) HTTP functions allow up to 60 minutes per request.
MAX_REQUEST_TIMEOUT_S = 3600
MAX_INSTANCES_LIMIT = 1000
MAX_CONCURRENCY = 1000
# The handler is I/O bound (Firestore round trips, a waiting duplicate's sleeps), so
# one instance serves several deliveries at once; see `config.capacity`.
DEFAULT_CONCURRENCY = 8

# Service-account ids are 6-30 characters and the longest suffix we append is "-invoker";
# with a 30-character project id the source bucket name stays within 63 characters.
_PREFIX = re.compile(r"[a-z][a-z0-9-]{0,20}[a-z0-9]")
_MEMORY = re.compile(r"\d+(Mi|Gi|M|G)")
_CPU = re.compile(r"\d+(\.\d+)?")
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
        "regions",
        "deadLetterTopic",
    }
)
# `deadLetterTopic`: a topic id the stack creates in gcp:project, or an existing topic's
# full name (Pub/Sub "Resource names": 3-255 characters from a letter, not "goog...").
_TOPIC_ID = re.compile(r"(?!goog)[A-Za-z][A-Za-z0-9._~+%-]{2,254}")
_DATABASE_KEYS = frozenset(
    {"name", "create", "location", "deletionProtection", "pointInTimeRecovery"}
)


def _regions(reader: ConfigValues, region: str) -> tuple[str, ...]:
    """`regions`: every region the schedule runs in, `gcp:region` first (default: it alone).

    The first region is the one every run key hashes (`Settings.key_region`), so a
    stack that adds a region keeps its records' keys: the list must start with
    `gcp:region`, the region the stack ran in before.
    """
    given = reader.structured("regions", list)
    if not given:
        return (region,)
    key = reader.key("regions")
    if not all(isinstance(item, str) and REGION.fullmatch(item) for item in given):
        raise ConfigError(f"{key}: expected a list of Google Cloud regions, got {given!r}")
    if len(set(given)) != len(given):
        raise ConfigError(f"{key}: {given!r} names a region twice")
    if given[0] != region:
        raise ConfigError(
            f"{key}: must start with gcp:region ({region!r}), the region every run key "
            f"hashes (got {given[0]!r} first); list the other regions after it"
        )
    return tuple(given)


def _parse_database(reader: ConfigValues, region: str, regions: tuple[str, ...]) -> DatabaseConfig:
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
        location=_database_location(db, region, regions),
        deletion_protection=db.boolean("deletionProtection", True),
        point_in_time_recovery=db.boolean("pointInTimeRecovery", False),
    )


def _database_location(db: ConfigValues, region: str, regions: tuple[str, ...]) -> str:
    """`database.location`, default the region, checked against Firestore's locations.

    A schedule in several regions needs a multi-region database: in one region, that
    region's outage would stop every region's runs (`regional_database_problem`).
    """
    location = db.text("location", region, re.compile(r"[a-z0-9-]+"), "a Firestore location")
    if location not in FIRESTORE_LOCATIONS and db.raw("location") is None:
        # The team set gcp:region, not database.location: name the key it set (a
        # misspelt region, or one without Firestore, where the ledger cannot follow it).
        nearest = difflib.get_close_matches(region, REGIONS, n=3, cutoff=0.5)
        raise ConfigError(
            f"gcp:region: {region!r} is not a Google Cloud region that Firestore offers"
            + (f" (nearest: {', '.join(nearest)})" if nearest else "")
            + f"; if {region} is right, set {db.key('location')} to a Firestore location "
            "near it (the ledger's database defaults to the region), e.g. nam5 or eur3"
        )
    if location not in FIRESTORE_LOCATIONS:
        raise ConfigError(
            f"{db.key('location')}: {location!r} is not a location Firestore offers; "
            "set database.location to a multi-region (nam5, nam7, eur3) or a Firestore "
            "region near gcp:region, e.g. us-central1 or europe-west1"
        )
    problem = regional_database_problem(location, regions)
    if problem:
        given = "" if db.raw("location") is not None else f" (the default: gcp:region {region})"
        raise ConfigError(f"{db.key('location')}: {location!r}{given} {problem}")
    return location


def _header(reader: ConfigValues, name: str, default: str) -> str:
    value = reader.text(
        name, default, facts.HEADER_NAME, "an HTTP header name (letters, digits, '-')"
    )
    lowered = value.lower()
    if lowered.startswith("x-cloudscheduler") or lowered in _RESERVED_HEADERS:
        raise ConfigError(f"{reader.key(name)}: {value!r} is set by Cloud Scheduler itself")
    if lowered in facts.JOB_SET_HEADERS:
        raise ConfigError(
            f"{reader.key(name)}: {value!r} is a header every job sets itself (its "
            "contentType), which would replace this one and get every delivery refused: "
            "choose another header name"
        )
    prefix = facts.reserved_header_prefix(value)
    if prefix is not None:
        raise ConfigError(
            f"{reader.key(name)}: {value!r} begins with {prefix!r}, which Cloud Scheduler "
            "reserves for Google in any case (target.proto); deliveries would arrive "
            "without it: choose another header name"
        )
    return value


def _runtime(reader: ConfigValues) -> str:
    """`handlerRuntime`: a Python runtime the handler can run on (facts.PYTHON_RUNTIMES)."""
    value = reader.text("handlerRuntime", "python312", re.compile(r".+"), "a runtime id")
    problem = facts.python_runtime_problem(value)
    if problem:
        raise ConfigError(f"{reader.key('handlerRuntime')}: {problem}")
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


def _dead_letter_topic(reader: ConfigValues, project: str) -> tuple[str | None, bool]:
    """`deadLetterTopic` as the topic's full name, and whether the stack creates it.

    A bare topic id names one the stack creates in gcp:project; a full name, an
    existing topic (in any project) that the stack only grants publishing on.
    """
    value = reader.optional_text("deadLetterTopic")
    if value is None:
        return None, False
    if DEAD_LETTER_TOPIC.fullmatch(value):
        return value, False
    if _TOPIC_ID.fullmatch(value):
        return f"projects/{project}/topics/{value}", True
    raise ConfigError(
        f"{reader.key('deadLetterTopic')}: {value!r} is neither a topic id the stack creates "
        "(3-255 letters, digits, - . _ ~ + %, from a letter, not 'goog...') nor an existing "
        "topic's name (projects/PROJECT/topics/TOPIC)"
    )


def _request_timeout(reader: ConfigValues, jobs: tuple[JobConfig, ...]) -> int:
    longest_deadline = max(job.attempt_deadline_s for job in jobs)
    request_timeout = reader.duration("requestTimeout", longest_deadline)
    if not longest_deadline <= request_timeout <= MAX_REQUEST_TIMEOUT_S:
        raise ConfigError(
            f"{reader.key('requestTimeout')}: {request_timeout}s must be at least the largest "
            f"attemptDeadline ({longest_deadline}s) and at most {MAX_REQUEST_TIMEOUT_S}s"
        )
    return request_timeout


def _refuse_another_namespace(values: Mapping[str, Any], project_name: str) -> None:
    """A stack file whose keys sit under another project's name: the project was renamed.

    Pulumi reads a project's own keys only under its `name:` (Pulumi project file
    reference, "name"; config keys are namespaced by project), so such a stack
    would silently lose every setting.
    """
    others = sorted(
        {
            key.split(":", 1)[0]
            for key in values
            if ":" in key and key.split(":", 1)[0] != "gcp" and key.split(":", 1)[1] in PROJECT_KEYS
        }
    )
    if others:
        found = next(key for key in values if key.startswith(f"{others[0]}:"))
        raise ConfigError(
            f"{project_name}:jobs: required; the stack file has {found} under the namespace "
            f"'{others[0]}:' instead, but Pulumi.yaml names the project {project_name!r}; rename "
            f"its keys to '{project_name}:...' (or the project back to {others[0]!r})"
        )


def parse_config(values: Mapping[str, Any], project_name: str = PROJECT_NAME) -> ScheduleConfig:
    """Validate a stack's config map and return the schedule it describes.

    `values` is the `config:` map of a `Pulumi.<stack>.yaml` (keys with their
    namespace, e.g. `gcp:project`, `scheduler-dedup:jobs`); `project_name` is the
    namespace of this project's own keys. Raises `ConfigError` naming the key.
    """
    # Other gcp: keys (zone, credentials, ...) configure the provider, not this program.
    platform_keys = frozenset({"project", "region"})
    gcp = {key[4:]: values[key] for key in values if key[4:] in platform_keys and key[:4] == "gcp:"}
    provider_keys = [key[4:] for key in values if key[:4] == "gcp:" and key[4:] not in gcp]
    platform = ConfigValues(gcp, "gcp:", platform_keys, beside=provider_keys)
    project = platform.text("project", None, PROJECT_ID, "a Google Cloud project id")
    region = platform.text("region", None, REGION, "a Google Cloud region")

    prefix = f"{project_name}:"
    own = {key[len(prefix) :]: value for key, value in values.items() if key.startswith(prefix)}
    if not own:
        _refuse_another_namespace(values, project_name)
    reader = ConfigValues(own, prefix, PROJECT_KEYS)
    jobs = parse_jobs(reader)
    request_timeout = _request_timeout(reader, jobs)

    concurrency = reader.integer("concurrency", DEFAULT_CONCURRENCY, 1, MAX_CONCURRENCY)
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

    regions = _regions(reader, region)
    dead_letter_topic, creates_topic = _dead_letter_topic(reader, project)
    config = ScheduleConfig(
        project=project,
        region=region,
        extra_regions=regions[1:],
        jobs=jobs,
        name_prefix=name_prefix,
        collection=_collection(reader),
        database=_parse_database(reader, region, regions),
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
        handler_runtime=_runtime(reader),
        ingress=reader.text(
            "ingress",
            "internal-only",
            re.compile("internal-only|internal-and-gclb|all"),
            "one of internal-only, internal-and-gclb, all",
        ),
        audit=parse_audit(reader),
        alerts=parse_alerts(reader),
        dead_letter_topic=dead_letter_topic,
        creates_dead_letter_topic=creates_topic,
    )
    check_audit(config, reader, reader.key("jobs"))
    _check_environment_size(config, reader.key("jobs"))
    return config


# Cloud Run functions: "The total number of bytes used by environment variable names and
# values for an individual function is limited to 32 KiB" (Cloud Run, "Environment
# variables for services", variable size limits for functions). The deploy adds the
# invoker allow-list (an e-mail address and a numeric id) to what is counted here.
ENVIRONMENT_LIMIT_BYTES = 32 * 1024
_DEPLOY_ADDS_BYTES = 256


def _check_environment_size(config: ScheduleConfig, jobs_key: str) -> None:
    """Refuse a stack whose handler environment Cloud Run would refuse at deploy."""
    env = config.handler_env()
    size = sum(len(name.encode()) + len(value.encode()) for name, value in env.items())
    if size + _DEPLOY_ADDS_BYTES > ENVIRONMENT_LIMIT_BYTES:
        raise ConfigError(
            f"{jobs_key}: the handler's environment would be about {size + _DEPLOY_ADDS_BYTES} "
            f"bytes, over Cloud Run functions' {ENVIRONMENT_LIMIT_BYTES}-byte limit for "
            "variable names and values (DEDUP_SCHEDULES holds every job's entry and body): "
            "shorten the bodies or split the jobs over two stacks"
        )
