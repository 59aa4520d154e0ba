"""The audit's part of the stack config: the `audit` and `alerts` settings, and their checks.

`parser.parse_config` calls these; every error is a `ConfigError` naming the
full key. The checks mirror what the handler refuses at start-up
(`runledger.schedules.audit_settings`), so a stack the program accepts never
deploys a handler that cannot start, and add the ones only the stack can make:
that the audit's look-back covers every run at least once, and that the alert on
an audit that stopped running can watch the audit's interval.
"""

from __future__ import annotations

import math
import re

from dedup_schedule.config.model import AlertsConfig, AuditConfig, ConfigError, ScheduleConfig
from dedup_schedule.config.values import ConfigValues
from runledger import facts
from runledger.audit.expected import repeated_s
from runledger.ledger.machine import MAX_CLOCK_SKEW

AUDIT_KEYS = frozenset({"enabled", "schedule", "lookback"})
ALERTS_KEYS = frozenset({"notificationChannels", "emails", "startLagSeconds"})
# Cloud Monitoring: a metric-absence condition's "trigger absence time" may be at most
# 23.5 hours ("Create metric-absence alerting policies").
MAX_ABSENCE_S = 23 * 3600 + 1800
# The longest start lag an alert may wait for: a week (a run later than that is long
# past any retry window; the audit reports it missed first).
MAX_START_LAG_S = 7 * 86400
_CHANNEL = re.compile(r"projects/[a-z0-9-]+/notificationChannels/[0-9]+")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


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
    """`alerts: {notificationChannels: [...], emails: [...], startLagSeconds: N}`, each optional."""
    values = reader.structured("alerts", dict) or {}
    alerts = ConfigValues(values, reader.key("alerts") + ".", ALERTS_KEYS)
    start_lag = None
    if alerts.raw("startLagSeconds") is not None:
        start_lag = alerts.integer("startLagSeconds", 0, 1, MAX_START_LAG_S)
    return AlertsConfig(
        start_lag_s=start_lag,
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
    interval = config.audit_interval_s
    skew = int(MAX_CLOCK_SKEW.total_seconds())
    settle = math.ceil(max(job.retry_window_s for job in config.jobs))
    # A wall time the clocks repeat is one run, recorded (and expiring) from its first
    # instant and settled from its last: the look-back must span the repeat too.
    repeat = max(repeated_s(job.time_zone) for job in config.jobs)
    needed = interval + settle + config.lease_seconds + skew + repeat
    if lookback < needed:
        parts = "retry window + lease" + (" + a repeated hour" if repeat else "")
        raise ConfigError(
            f"{audit_key}.lookback: {lookback}s is too short to judge every run once: "
            f"the audit runs up to {interval}s apart and a run settles up to "
            f"{needed - interval}s after its schedule time ({parts}); set it "
            f"to at least {needed}s or run the audit more often"
        )
    if config.audit_absence_s > MAX_ABSENCE_S:
        raise ConfigError(
            f"{audit_key}.schedule: the audit runs up to {interval}s apart; Cloud Monitoring "
            f"can only alert on a missing audit within {MAX_ABSENCE_S}s, so run it more often"
        )
