"""The audit's part of the stack config: per-job catch-up, the `audit` and `alerts` settings.

`config_reader.parse_config` calls these; every error is a `ConfigError` naming the
full key. The checks mirror what the handler refuses at start-up
(`runledger.schedules.audit_settings`), so a stack the program accepts never
deploys a handler that cannot start, and add the ones only the stack can make:
that the audit's look-back covers every run at least once, and that the alert on
an audit that stopped running can watch the audit's interval.
"""

from __future__ import annotations

import functools
import math
import re
from datetime import UTC, datetime, timedelta

from croniter import croniter

from dedup_schedule.config import AlertsConfig, AuditConfig, ConfigError, ScheduleConfig
from dedup_schedule.config_values import ConfigValues
from runledger import facts, schedules
from runledger.ledger import MAX_CLOCK_SKEW

AUDIT_KEYS = frozenset({"enabled", "schedule", "lookback"})
ALERTS_KEYS = frozenset({"notificationChannels", "emails"})
# Cloud Monitoring: a metric-absence condition's "trigger absence time" may be at most
# 23.5 hours ("Create metric-absence alerting policies").
MAX_ABSENCE_S = 23 * 3600 + 1800
# Time the audit's summary line may come later than its schedule time beyond its
# attempt deadline (instance start, log ingestion) before its absence is an alert.
ABSENCE_SLACK_S = 300
_CHANNEL = re.compile(r"projects/[a-z0-9-]+/notificationChannels/[0-9]+")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
# How far ahead the audit schedule's longest interval is searched: a year, or this many
# audit times, which covers every pattern repeating within weeks at a 5-minute rate.
_GAP_SCAN_TIMES = 20_000
_GAP_SCAN_START = datetime(2025, 1, 1, tzinfo=UTC)


def parse_catch_up(job: ConfigValues) -> tuple[bool, int]:
    """A job's `catchUp` (default false) and `catchUpMaxAge` (default 1 hour)."""
    max_age = job.duration("catchUpMaxAge", int(schedules.DEFAULT_CATCH_UP_MAX_AGE.total_seconds()))
    if max_age < 1:
        raise ConfigError(f"{job.key('catchUpMaxAge')}: must be at least 1s")
    return job.boolean("catchUp", False), max_age


def parse_audit(reader: ConfigValues) -> AuditConfig:
    """`audit: {enabled, schedule, lookback}`, each optional."""
    values = reader.structured("audit", dict) or {}
    audit = ConfigValues(values, reader.key("audit") + ".", AUDIT_KEYS)
    defaults = AuditConfig()
    schedule = audit.text(
        "schedule", defaults.schedule, re.compile(r".+"), "a unix-cron schedule (in UTC)"
    )
    problem = facts.schedule_problem(schedule)
    if problem:
        raise ConfigError(f"{audit.key('schedule')}: {problem}")
    lookback = audit.duration("lookback", 0) if audit.raw("lookback") is not None else None
    if lookback is not None and lookback < 1:
        raise ConfigError(f"{audit.key('lookback')}: must be at least 1s")
    return AuditConfig(
        enabled=audit.boolean("enabled", defaults.enabled),
        schedule=" ".join(schedule.split()),
        lookback_s=lookback,
    )


def parse_alerts(reader: ConfigValues) -> AlertsConfig:
    """`alerts: {notificationChannels: [...], emails: [...]}`, each optional."""
    values = reader.structured("alerts", dict) or {}
    alerts = ConfigValues(values, reader.key("alerts") + ".", ALERTS_KEYS)
    return AlertsConfig(
        notification_channels=_strings(
            alerts, "notificationChannels", _CHANNEL, "projects/PROJECT_ID/notificationChannels/ID"
        ),
        emails=_strings(alerts, "emails", _EMAIL, "an e-mail address"),
    )


def _strings(
    reader: ConfigValues, name: str, pattern: re.Pattern[str], what: str
) -> tuple[str, ...]:
    items = reader.structured(name, list) or []
    for index, item in enumerate(items):
        if not isinstance(item, str) or not pattern.fullmatch(item):
            raise ConfigError(f"{reader.key(name)}[{index}]: {item!r} is not {what}")
    if len(set(items)) != len(items):
        raise ConfigError(f"{reader.key(name)}: lists an entry twice")
    return tuple(items)


@functools.cache
def longest_interval_s(schedule: str) -> int:
    """The longest time between two consecutive times of a unix-cron schedule in UTC.

    Kept per schedule: the scan lists up to a year of times, and one program run
    asks for the audit schedule's interval from several places.
    """
    times = croniter(schedule, _GAP_SCAN_START)
    previous = times.get_next(datetime)
    end = _GAP_SCAN_START + timedelta(days=366)
    longest = timedelta(0)
    for _ in range(_GAP_SCAN_TIMES):
        current = times.get_next(datetime)
        longest = max(longest, current - previous)
        if current > end:
            break
        previous = current
    return int(longest.total_seconds())


def audit_absence_s(config: ScheduleConfig) -> int:
    """How long no audit summary line may be seen before the audit counts as stopped.

    The longest interval between audit times, plus the audit's attempt deadline
    (the summary is written at the end), plus slack, in whole minutes as the
    condition requires.
    """
    audit = config.audit_job
    if audit is None:
        raise ValueError("the audit is disabled")
    seconds = longest_interval_s(audit.schedule) + audit.attempt_deadline_s + ABSENCE_SLACK_S
    return -(-seconds // 60) * 60


def check_audit(config: ScheduleConfig, reader: ConfigValues, jobs_key: str) -> None:
    """Cross-checks of the audit settings against the jobs, the lease and the retention."""
    audit_key = reader.key("audit")
    for index, job in enumerate(config.jobs):
        where = f"{jobs_key}[{index}]"
        if job.id in config.reserved_job_ids:
            raise ConfigError(
                f"{where}.id: {job.id!r} is reserved for the stack's audit job; rename the job"
            )
        if not job.catch_up:
            continue
        if not config.audit.enabled:
            raise ConfigError(
                f"{where}.catchUp: catch-up runs inside the audit, but {audit_key}.enabled is false"
            )
        if job.catch_up_max_age_s + config.lease_seconds >= config.retention_seconds:
            raise ConfigError(
                f"{where}.catchUpMaxAge: {job.catch_up_max_age_s}s plus the "
                f"{config.lease_seconds}s lease must be shorter than the "
                f"{config.retention_seconds}s retention (raise retentionMargin or lower it)"
            )
    lookback = config.audit_lookback_s
    if lookback >= config.retention_seconds:
        raise ConfigError(
            f"{audit_key}.lookback: {lookback}s must be shorter than the "
            f"{config.retention_seconds}s retention, or older runs read as missed"
        )
    if not config.audit.enabled:
        return
    interval = longest_interval_s(config.audit.schedule)
    skew = int(MAX_CLOCK_SKEW.total_seconds())
    settle = math.ceil(max(job.retry_window_s for job in config.jobs))
    needed = interval + settle + config.lease_seconds + skew
    if lookback < needed:
        raise ConfigError(
            f"{audit_key}.lookback: {lookback}s is too short to judge every run once: "
            f"the audit runs up to {interval}s apart and a run settles up to "
            f"{needed - interval}s after its schedule time (retry window + lease); set it "
            f"to at least {needed}s or run the audit more often"
        )
    if audit_absence_s(config) > MAX_ABSENCE_S:
        raise ConfigError(
            f"{audit_key}.schedule: the audit runs up to {interval}s apart; Cloud Monitoring "
            f"can only alert on a missing audit within {MAX_ABSENCE_S}s, so run it more often"
        )
