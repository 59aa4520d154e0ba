"""The schedule a stack describes, validated: plain dataclasses and the values derived from them.

`dedup_schedule.config_reader.parse_config` builds a `ScheduleConfig` from a stack's
config map, whether the Pulumi program read it through `pulumi.Config` or the
offline tools from a `Pulumi.<stack>.yaml` on disk (`offline.stack_file`). The
Pulumi program, the offline plan and the local demo all use this one model, so the
demo runs what `pulumi up` deploys. No module of the config imports `pulumi`. The
policy pack does not use it: the pack installs on its own and carries a copy of the
shared facts (`runledger.facts`) instead.

Limits, retry arithmetic, the unix-cron and id rules and the handler's defaults come
from `runledger.facts`, the one Pulumi-free home the handler, this program, the local
demo and (as a tested copy) the policy pack share.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from runledger import facts, schedules


class ConfigError(ValueError):
    """A stack config value is missing or invalid; the message starts with its key."""


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
    retry: facts.RetryPolicy
    target: TargetConfig | None = None
    # Opt-in: the audit runs a missed or released run itself, if not older than the max age.
    catch_up: bool = False
    catch_up_max_age_s: int = int(schedules.DEFAULT_CATCH_UP_MAX_AGE.total_seconds())
    # The Scheduler job is created (and kept) paused: its times are deliberately not run.
    paused: bool = False
    # What a delivery does while another run of the job is in progress (runledger.overlap).
    overlap: str = facts.OVERLAP_ALLOW

    @property
    def retry_window_s(self) -> float:
        """Longest time from the first attempt of a run until its last attempt can end."""
        return self.retry.retry_window_s(self.attempt_deadline_s)

    def schedule_entry(self) -> dict[str, object]:
        """This job's entry of DEDUP_SCHEDULES (the contract `runledger.schedules` reads)."""
        return {
            "id": self.id,
            "schedule": self.schedule,
            "timeZone": self.time_zone,
            # Whole seconds, rounded up, so the audit never judges a run too early.
            "retryWindowSeconds": math.ceil(self.retry_window_s),
            "attemptDeadlineSeconds": self.attempt_deadline_s,
            "catchUp": self.catch_up,
            "catchUpMaxAgeSeconds": self.catch_up_max_age_s,
            # Only when set, so every other entry stays as it was.
            **({"paused": True} if self.paused else {}),
            **({"overlap": self.overlap} if self.overlap != facts.OVERLAP_ALLOW else {}),
        }


@dataclass(frozen=True)
class DatabaseConfig:
    """The Firestore database that holds the run ledger."""

    name: str
    create: bool
    location: str
    deletion_protection: bool
    point_in_time_recovery: bool


@dataclass(frozen=True)
class AuditConfig:
    """The stack's audit: its own Scheduler job, which checks every job's runs in the ledger.

    enabled: deploy the audit job and the alert on an audit that stopped running.
    schedule: unix-cron, evaluated in UTC; how often the audit runs.
    lookback_s: how far back each audit looks; None means the handler's default
        (6 hours, or retention minus lease if that is shorter).
    """

    enabled: bool = True
    schedule: str = "*/30 * * * *"
    lookback_s: int | None = None


@dataclass(frozen=True)
class AlertsConfig:
    """Where the stack's alert policies notify; with neither, the alerts exist but notify nobody.

    notification_channels: existing Cloud Monitoring channels, `projects/P/notificationChannels/ID`.
    emails: addresses the stack creates an e-mail notification channel for, one each.
    """

    notification_channels: tuple[str, ...] = ()
    emails: tuple[str, ...] = ()


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
    # Who may reach the function over the network: "internal-only", "internal-and-gclb"
    # or "all" (`ingress` config key).
    ingress: str
    audit: AuditConfig = field(default_factory=AuditConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)

    @property
    def lease_seconds(self) -> int:
        """How long a claim blocks other deliveries of the same run.

        Cloud Run does not stop a request at its timeout, so the lease covers the
        whole request timeout (which is at least every attempt deadline) plus a margin.
        """
        return self.request_timeout_s + self.lease_margin_s

    @property
    def heartbeat_seconds(self) -> int | None:
        """DEDUP_HEARTBEAT_SECONDS: the lease a claim takes, renewed while its job runs.

        A holder that dies stops blocking its run after this (plus the clock-skew
        margin), so Scheduler's next retry redoes it; a live one renews it every
        third (`runledger.lease`). None when the whole lease is no longer than that.
        """
        return facts.HEARTBEAT_S if self.lease_seconds > facts.HEARTBEAT_S else None

    @property
    def retention_seconds(self) -> int:
        """How long a run record must survive: past every retry of the slowest job.

        Whole seconds, rounded up: the handler takes DEDUP_RETENTION_SECONDS as an integer.
        """
        longest = max(job.retry_window_s for job in self.jobs)
        return math.ceil(max(longest, self.lease_seconds)) + self.retention_margin_s

    @property
    def audit_lookback_s(self) -> int:
        """DEDUP_AUDIT_LOOKBACK_SECONDS: as configured, else the handler's own default."""
        if self.audit.lookback_s is not None:
            return self.audit.lookback_s
        default = int(schedules.DEFAULT_LOOKBACK.total_seconds())
        return min(default, self.retention_seconds - self.lease_seconds)

    @property
    def audit_job_id(self) -> str:
        """The audit's Scheduler job id, `<prefix>-audit`: Scheduler job ids are unique per
        project and location, so two stacks in one project need one each. The handler
        learns it from DEDUP_AUDIT_JOB."""
        return f"{self.name_prefix}-audit"

    @property
    def reserved_job_ids(self) -> frozenset[str]:
        """Ids no configured job may take: the stack's audit job's, and the handler's default
        audit id (`runledger.schedules.AUDIT_JOB_ID`, served when DEDUP_AUDIT_JOB is unset)."""
        return frozenset({self.audit_job_id, schedules.AUDIT_JOB_ID})

    @property
    def audit_job(self) -> JobConfig | None:
        """The audit's own Scheduler job, delivered under `audit_job_id`.

        It may take as long as a request may (its catch-ups run inside it), up to
        Cloud Scheduler's 30-minute limit, and is never retried: the next audit's
        look-back covers the same runs again.
        """
        if not self.audit.enabled:
            return None
        return JobConfig(
            id=self.audit_job_id,
            schedule=self.audit.schedule,
            time_zone="UTC",
            description="Checks every scheduled run of this stack's jobs against the ledger",
            attempt_deadline_s=min(self.request_timeout_s, facts.MAX_ATTEMPT_DEADLINE_S),
            body=None,
            content_type="application/json",
            retry=facts.RetryPolicy(),
        )

    @property
    def scheduler_jobs(self) -> tuple[JobConfig, ...]:
        """Every Cloud Scheduler job the stack deploys: the configured ones and the audit."""
        audit = self.audit_job
        return self.jobs if audit is None else (*self.jobs, audit)

    def schedules_json(self) -> str:
        """DEDUP_SCHEDULES: every configured job's schedule and timing (not the audit's)."""
        return json.dumps([job.schedule_entry() for job in self.jobs], separators=(",", ":"))

    def handler_env(self) -> dict[str, str]:
        """The handler's static DEDUP_* settings (the invoker allow-list is added at deploy)."""
        heartbeat = self.heartbeat_seconds
        return {
            "DEDUP_COLLECTION": self.collection,
            "DEDUP_DATABASE": self.database.name,
            "DEDUP_LEASE_SECONDS": str(self.lease_seconds),
            **({} if heartbeat is None else {"DEDUP_HEARTBEAT_SECONDS": str(heartbeat)}),
            "DEDUP_RETENTION_SECONDS": str(self.retention_seconds),
            "DEDUP_PROJECT_HEADER": self.project_header,
            "DEDUP_REGION_HEADER": self.region_header,
            "DEDUP_MANUAL_RUNS": self.manual_runs,
            "DEDUP_JOBS_MODULE": facts.DEFAULT_JOBS_MODULE,
            "DEDUP_ALLOWED_PROJECTS": self.project,
            "DEDUP_ALLOWED_REGIONS": self.region,
            "GOOGLE_CLOUD_PROJECT": self.project,
            schedules.VARIABLE: self.schedules_json(),
            schedules.LOOKBACK_VARIABLE: str(self.audit_lookback_s),
            schedules.AUDIT_JOB_VARIABLE: self.audit_job_id,
        }
