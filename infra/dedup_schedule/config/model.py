"""The schedule a stack describes, validated: plain dataclasses and the values derived from them.

`dedup_schedule.config.parser.parse_config` builds a `ScheduleConfig` from a stack's
config map, whether the Pulumi program read it through `pulumi.Config` or the
offline tools from a `Pulumi.<stack>.yaml` on disk (`scheduler_dedup.offline.stack_file`). The
Pulumi program, the offline plan and the local demo all use this one model, so the
demo runs what `pulumi up` deploys. No module of the config imports `pulumi`. The
policy pack does not use it: the pack installs on its own and carries a copy of the
shared facts (`runledger.facts`) instead.

Limits, retry arithmetic, the unix-cron and id rules and the handler's defaults come
from `runledger.facts`, the one Pulumi-free home the handler, this program, the local
demo and (as a tested copy) the policy pack share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache, cached_property

from croniter import croniter

from runledger import facts, schedules
from runledger.config import ManualRuns, Settings

# Time the audit's summary line may come later than its schedule time beyond its
# attempt deadline (instance start, log ingestion) before its absence is an alert.
ABSENCE_SLACK_S = 300
# How far ahead the audit schedule's longest interval is searched: a year, or this many
# audit times, which covers every pattern repeating within weeks at a 5-minute rate.
_GAP_SCAN_TIMES = 20_000
_GAP_SCAN_START = datetime(2025, 1, 1, tzinfo=UTC)


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
    # What a delivery does while another run of the job is in progress (runledger.ledger.overlap).
    overlap: str = facts.OVERLAP_ALLOW
    # The active window (`startAt`/`endAt`): outside it no time is expected nor run.
    start_at: datetime | None = None
    end_at: datetime | None = None
    # Suspend the job after this many scheduled runs in a row failed for good (None: never).
    suspend_after_failures: int | None = None

    @property
    def retry_window_s(self) -> float:
        """Longest time from the first attempt of a run until its last attempt can end."""
        return self.retry.retry_window_s(self.attempt_deadline_s)

    def schedule_entry(self) -> dict[str, object]:
        """This job's entry of DEDUP_SCHEDULES (the contract `runledger.schedules` reads)."""
        return schedules.schedule_entry(
            self.id,
            self.schedule,
            self.time_zone,
            retry_window_s=self.retry_window_s,
            attempt_deadline_s=self.attempt_deadline_s,
            catch_up=self.catch_up,
            catch_up_max_age_s=self.catch_up_max_age_s,
            paused=self.paused,
            overlap=self.overlap,
            body=self.body,
            start_at=self.start_at,
            end_at=self.end_at,
            suspend_after=self.suspend_after_failures,
        )


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
    # `startLagSeconds`: page when a run of a job started (was claimed) more than this
    # long after its schedule time; None: no such alert (the metric and chart stay).
    start_lag_s: int | None = None


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
    # `deadLetterTopic`: the full name of the topic final failures are published to.
    dead_letter_topic: str | None = None
    # Whether the stack creates that topic (the key named a bare topic id) or it exists.
    creates_dead_letter_topic: bool = False
    # The regions after `region` the schedule also runs in (`regions` config key): each
    # gets its own function and Scheduler jobs; every run key hashes `region`.
    extra_regions: tuple[str, ...] = ()

    @property
    def regions(self) -> tuple[str, ...]:
        """Every region the schedule runs in, the key region (`region`) first."""
        return (self.region, *self.extra_regions)

    def region_suffix(self, region: str) -> str:
        """What a region's resource names add to the prefix: nothing for the first region,
        so a stack that adds a region keeps its resources' names and URNs."""
        return "" if region == self.region else f"-{region}"

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
        third (`runledger.ledger.lease`). None when the whole lease is no longer than that.
        """
        return facts.HEARTBEAT_S if self.lease_seconds > facts.HEARTBEAT_S else None

    def window_warnings(self, now: datetime) -> list[str]:
        """One line per job whose `endAt` has passed: Scheduler still fires it, for nothing."""
        return [
            f"jobs[{index}].endAt: {job.end_at.isoformat()} has passed; job {job.id!r} "
            "still fires and every delivery is answered outside_window (remove the job, "
            "or pause it)"
            for index, job in enumerate(self.jobs)
            if job.end_at is not None and job.end_at < now
        ]

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

        It is never retried: the next audit's look-back covers the same runs again.
        """
        if not self.audit.enabled:
            return None
        return JobConfig(
            id=self.audit_job_id,
            schedule=self.audit.schedule,
            time_zone="UTC",
            description="Checks every scheduled run of this stack's jobs against the ledger",
            attempt_deadline_s=self.audit_attempt_deadline_s,
            body=None,
            content_type="application/json",
            retry=facts.RetryPolicy(),
        )

    @property
    def audit_attempt_deadline_s(self) -> int:
        """The audit job's attempt deadline: as long as a request may take (its catch-ups
        run inside it), up to Cloud Scheduler's 30-minute limit."""
        return min(self.request_timeout_s, facts.MAX_ATTEMPT_DEADLINE_S)

    @cached_property
    def audit_interval_s(self) -> int:
        """The longest time between two consecutive times of the audit's schedule."""
        return longest_interval_s(self.audit.schedule)

    @property
    def audit_absence_s(self) -> int:
        """How long no audit summary line may be seen before the audit counts as stopped.

        The longest interval between audit times, plus the audit's attempt deadline
        (the summary is written at the end), plus slack, in whole minutes as the
        alert's absence condition requires.
        """
        seconds = self.audit_interval_s + self.audit_attempt_deadline_s + ABSENCE_SLACK_S
        return -(-seconds // 60) * 60

    @property
    def scheduler_jobs(self) -> tuple[JobConfig, ...]:
        """Every Cloud Scheduler job the stack deploys: the configured ones and the audit."""
        audit = self.audit_job
        return self.jobs if audit is None else (*self.jobs, audit)

    def schedules_json(self) -> str:
        """DEDUP_SCHEDULES: every configured job's schedule and timing (not the audit's)."""
        return schedules.schedules_json([job.schedule_entry() for job in self.jobs])

    def handler_env(self, region: str | None = None) -> dict[str, str]:
        """The static DEDUP_* settings of `region`'s handler (None: the first region's; the
        invoker allow-list is added at deploy).

        Each region's handler admits its own region's deliveries; with several regions
        all key their runs by the first region (DEDUP_KEY_REGION), so one time delivered
        from every region is one run, and the audit lists each region (DEDUP_REGIONS).
        """
        region = region or self.region
        heartbeat = self.heartbeat_seconds
        settings = Settings(
            collection=self.collection,
            database=self.database.name,
            lease=timedelta(seconds=self.lease_seconds),
            retention=timedelta(seconds=self.retention_seconds),
            project_header=self.project_header,
            region_header=self.region_header,
            manual_runs=ManualRuns(self.manual_runs),
            jobs_module=facts.DEFAULT_JOBS_MODULE,
            allowed_invokers=frozenset(),
            allowed_projects=frozenset({self.project}),
            allowed_regions=frozenset({region}),
            duplicate_wait=None,
            heartbeat=None if heartbeat is None else timedelta(seconds=heartbeat),
            key_region=self.region if self.extra_regions else None,
            regions=frozenset(self.regions) if self.extra_regions else frozenset(),
            dead_letter_topic=self.dead_letter_topic,
        )
        return {
            **settings.to_env(),
            "GOOGLE_CLOUD_PROJECT": self.project,
            **schedules.audit_env(
                [job.schedule_entry() for job in self.jobs],
                self.audit_lookback_s,
                self.audit_job_id,
            ),
        }


@cache
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
