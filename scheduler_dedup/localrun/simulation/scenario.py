"""What happens in one seed's world, drawn from the seed alone.

The stack: five jobs covering every overlap policy, catch-up on and off, local
time zones on a daylight-saving day (Europe/Berlin on the last Sundays of March
and October, America/New_York in March and November) or an ordinary one, and
the audit every ten minutes. The operator: forced runs with and without
ScheduleTime, pauses from the console (live state only) and from the stack (a
deploy), short and long, a console edit of a schedule and its undo, backfills
with and without --include-failed (`backfill_modes`: --only missing, failed or
all, newest first or not). The faults: the store's (`store.FaultPlan`), outages,
partitions of one instance, lost answers and duplicate deliveries, clock skew
within `MAX_CLOCK_SKEW` between instances, the deletion of the audit's documents.

`FEATURES` names the fault classes whose fixes are still on their way: each is
on unless switched off (`Scenario` takes the set that is on), so a seed says
exactly what it exercised.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from runledger.config import ManualRuns, Settings
from runledger.facts import DEFAULT_PROJECT_HEADER, DEFAULT_REGION_HEADER, RetryPolicy
from runledger.ledger.machine import MAX_CLOCK_SKEW
from scheduler_dedup.localrun.simulation import (
    deploys,
    regions,
    scheduler_api,
    timeouts,
    ttl,
    work,
)
from scheduler_dedup.localrun.simulation.regions import RegionOutage
from scheduler_dedup.localrun.simulation.timeouts import RequestTimeout
from scheduler_dedup.localrun.simulation.ttl import Retention

if TYPE_CHECKING:
    from scheduler_dedup.localrun.simulation.world import World

# The fault classes a run can hold back (`--without`), each with what it adds to the world.
FEATURES = {
    "delete_audit_docs": "runledger_audit (epochs, watermarks, slots) deleted while jobs run",
    "lost_slotted_claim": "a slotted claim that lands and loses its answer",
    "backfill_overlap": "backfill and catch-up of skip/delay jobs while one of their runs works",
    "stack_unpause": "the stack unpauses a job it paused",
    "pause_evidence": "console pauses (short ones between audits), pauses in a repeated hour",
    "audit_crash_after_save": "an audit killed, or its watermark write's answer lost, after "
    "that write and before its finding lines",
    "operator_skew": "reported failures rerun (--include-failed) from a laptop clock up to "
    "30 minutes off",
    # Issue 35: production's world.
    "job_work": "job bodies that checkpoint their stages (ctx.stage) and emit a once-only "
    "output (ctx.output), under every store fault",
    "request_timeout": "Cloud Run's request timeout cuts requests mid-job: 504 to Scheduler, "
    "the code works on with its CPU throttled",
    "pause_api_versions": "pauses and resumes made through the v1beta1 and v1alpha1 APIs "
    "(gcloud beta/alpha), logged under those versions' method names",
    "unreadable_scheduler": "the Scheduler listing and the pause log refused (403), "
    "rate-limited (429), failing or timing out, and the log's ingestion lag of seconds "
    "to minutes",
    "ttl_deletion": "TTL deletes records past expire_at, with the shortest retention the "
    "program accepts, while jobs run and Scheduler retries",
    # Issue 36: the operator's controls.
    "active_window": "a job's active window (startAt/endAt) opening and closing mid-run",
    "suspension": "a job suspended after failures in a row, or by the operator, and resumed",
    "backfill_modes": "backfills --only missing, failed or all (completed times rerun as a "
    "new generation), oldest or newest first",
    "dead_letters": "final failures pushed to a Pub/Sub topic whose publishes fail or lose "
    "their answers",
    "ops_release": "the operator releases failed runs (`ops release`) from a laptop clock "
    "up to 30 minutes off, from two terminals at once, and runs that moved on meanwhile",
    "deploy_in_flight": "deploys while runs are in flight: two handler revisions taking "
    "new requests at once (another heartbeat or retention, or a contract the handler "
    "refuses), a job created, rescheduled and deleted by the stack",
    # Issue 37: a schedule sent from two regions.
    "region_outage": "the stack in two regions, one out for a minute to two hours (its "
    "Scheduler stops, its function answers 5xx or times out, or loses the store), both "
    "delivering every time at the same instant",
}
PROJECT, REGION = "sim-project", "europe-west1"
# Daylight-saving days (and an ordinary one): the window's start and the zone it is about.
DAYS = (
    (datetime(2026, 3, 29, 0, 0, tzinfo=UTC), "Europe/Berlin"),
    (datetime(2026, 10, 25, 0, 0, tzinfo=UTC), "Europe/Berlin"),
    (datetime(2026, 3, 8, 5, 30, tzinfo=UTC), "America/New_York"),
    (datetime(2026, 11, 1, 5, 0, tzinfo=UTC), "America/New_York"),
    (datetime(2026, 6, 10, 0, 0, tzinfo=UTC), "Europe/Berlin"),
)
DURATION = timedelta(hours=2)
AUDIT_EVERY = "*/10 * * * *"
SETTINGS = Settings(
    collection="scheduler_runs",
    database="(default)",
    lease=timedelta(minutes=15),
    retention=timedelta(days=2),
    project_header=DEFAULT_PROJECT_HEADER,
    region_header=DEFAULT_REGION_HEADER,
    manual_runs=ManualRuns.SEPARATE,
    jobs_module="simulation_jobs",
    allowed_invokers=frozenset(),
    allowed_projects=frozenset({PROJECT}),
    allowed_regions=frozenset({REGION}),
    duplicate_wait=None,
    heartbeat=timedelta(seconds=60),
)

Action = Callable[["World"], None]


@dataclass(frozen=True)
class SimJob:
    id: str
    schedule: str
    time_zone: str
    overlap: str
    catch_up: bool
    deadline: timedelta
    retry: RetryPolicy
    work_s: tuple[float, float]
    retryable: float = 0.0
    terminal: float = 0.0
    # The active window (`startAt`/`endAt`): its times outside are deliberately not run.
    start_at: datetime | None = None
    end_at: datetime | None = None
    # `suspendAfterFailures` (None: off): its runs stop after that many failures in a row.
    suspend_after: int | None = None

    def in_window(self, when: datetime) -> bool:
        return (self.start_at is None or self.start_at <= when) and (
            self.end_at is None or when <= self.end_at
        )


@dataclass
class Scenario:
    seed: int
    rng: random.Random
    start: datetime
    end: datetime  # the last scheduled time judged
    settle: datetime  # every time's last attempt is over: see docs/reliability.md, "settled"
    jobs: list[SimJob]
    audit: SimJob
    features: frozenset[str]
    fault_rate: float
    partition_rate: float
    lost_claims: float
    lost_answers: float
    duplicates: float
    operator_skew: timedelta
    outages: tuple[tuple[datetime, datetime], ...]
    spared: frozenset[tuple[str, str]]
    actions: list[tuple[datetime, Action]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    settings: Settings = SETTINGS
    lookback_s: int = 6 * 3600
    project: str = PROJECT
    region: str = REGION
    skew: timedelta = timedelta(seconds=1)  # each instance's clock within ±skew
    staged: dict[str, int] = field(default_factory=dict)  # `job_work`: job -> its stages
    request_timeout: RequestTimeout | None = None  # `request_timeout`
    # `pause_api_versions`, `unreadable_scheduler`: how the audit's REST reads are answered.
    api_versions: tuple[str, ...] = ("v1",)
    api_fault_rate: float = 0.0
    log_lags_s: tuple[int, ...] = (0,)
    ttl: Retention | None = None  # `ttl_deletion`
    # `region_outage`: every region the stack runs in, the key region (`region`) first.
    regions: tuple[str, ...] = (REGION,)
    region_outages: tuple[RegionOutage, ...] = ()
    deploys: deploys.Plan | None = None  # `deploy_in_flight`


def _retry(rng: random.Random, most: int) -> RetryPolicy:
    return RetryPolicy(
        retry_count=rng.randint(0, most),
        min_backoff_s=rng.choice((5, 10, 30)),
        max_backoff_s=rng.choice((60, 300)),
        max_doublings=rng.randint(1, 5),
    )


def _jobs(rng: random.Random, zone: str, features: frozenset[str]) -> list[SimJob]:
    overlapping_catch_up = "backfill_overlap" in features and rng.random() < 0.5
    deadline = lambda: timedelta(seconds=rng.choice((30, 60, 180)))  # noqa: E731
    return [
        SimJob(
            "sync",
            "*/5 * * * *",
            zone,
            "allow",
            True,
            deadline(),
            _retry(rng, 3),
            (5, 90),
            0.08,
            0.02,
        ),
        SimJob(
            "skipper",
            "* * * * *",
            zone,
            "skip",
            overlapping_catch_up,
            deadline(),
            _retry(rng, 2),
            (20, 150),
            0.05,
            0.01,
        ),
        SimJob(
            "delayer",
            "*/3 * * * *",
            "UTC",
            "delay",
            overlapping_catch_up,
            deadline(),
            _retry(rng, 5),
            (20, 240),
            0.05,
            0.01,
        ),
        SimJob(
            "minutely",
            "* * * * *",
            zone,
            "allow",
            False,
            deadline(),
            _retry(rng, 1),
            (1, 20),
            0.05,
            0.02,
        ),
        SimJob(
            "dst",
            "*/10 0-4 * * *",
            zone,
            "allow",
            True,
            deadline(),
            _retry(rng, 3),
            (5, 60),
            0.1,
            0.02,
        ),
    ]


def generate(seed: int, features: frozenset[str]) -> Scenario:
    """The stack and the faults of `seed` with the fault classes `features` on.

    The operator's actions come after, from the same generator (`operator.draw`).
    """
    rng = random.Random(seed)
    start, zone = rng.choice(DAYS)
    end = start + DURATION
    jobs = _jobs(rng, zone, features)
    audit = SimJob(
        "sim-audit",
        AUDIT_EVERY,
        "UTC",
        "allow",
        False,
        timedelta(minutes=5),
        RetryPolicy(retry_count=2, min_backoff_s=30),
        (0, 0),
    )
    outages = tuple(
        (at, at + timedelta(seconds=rng.choice((10, 60, 300, 1200, 2400))))
        for at in sorted(moment(rng, start, end) for _ in range(rng.randint(0, 2)))
    )
    # Settled once every time's last attempt is over (its retry window and a lease past
    # the end or the last outage) and then two audits have logged their summary.
    longest = max(job.retry.retry_window_s(job.deadline.total_seconds()) for job in jobs)
    quiet = max([end, *(until for _, until in outages)])
    settle = quiet + timedelta(seconds=longest) + SETTINGS.lease + MAX_CLOCK_SKEW
    spared = set()
    if "lost_slotted_claim" not in features:
        spared.add(("claim_slotted", "lost"))
    if "audit_crash_after_save" not in features:
        spared.update(
            (call, fault)
            for call in ("create_shard", "replace_shard")
            for fault in ("lost", "kill_after")
        )
    skew = rng.uniform(-1800, 1800) if "operator_skew" in features else rng.uniform(-1, 1)
    if "active_window" in features:
        # A generator of its own: every other draw of the seed stays as without windows.
        jobs = _windowed(random.Random(f"{seed}-active-window"), jobs, start, end)
    if "suspension" in features:
        jobs = _suspending(random.Random(f"{seed}-suspension"), jobs)
    scenario = Scenario(
        seed=seed,
        rng=rng,
        start=start,
        end=end,
        settle=settle,
        jobs=jobs,
        audit=audit,
        features=features,
        fault_rate=rng.choice((0.0, 0.002, 0.01, 0.03)),
        partition_rate=rng.choice((0.002, 0.005, 0.01)),
        lost_claims=rng.choice((0.02, 0.1)) if "lost_slotted_claim" in features else 0.0,
        lost_answers=rng.choice((0.0, 0.02, 0.1)),
        duplicates=rng.choice((0.0, 0.02, 0.1)),
        operator_skew=timedelta(seconds=skew),
        outages=outages,
        spared=frozenset(spared),
    )
    # Each class of issue 35 draws last, and only when on: the worlds of the others stay.
    if "job_work" in features:
        scenario.staged = work.draw(rng, jobs)
    if "request_timeout" in features:
        longest = max(max(job.deadline.total_seconds(), job.work_s[1]) for job in jobs)
        timeout = timeouts.draw(rng, timedelta(seconds=longest))
        scenario.request_timeout = timeout
        scenario.audit = dataclasses.replace(audit, deadline=timeout.after)
    if "pause_api_versions" in features:
        scenario.api_versions = scheduler_api.VERSIONS
    if "unreadable_scheduler" in features:
        scenario.api_fault_rate = rng.choice(scheduler_api.FAULT_RATES)
        scenario.log_lags_s = scheduler_api.LAGS_S
    if "ttl_deletion" in features:
        kept = ttl.draw(rng, jobs, SETTINGS.lease, timedelta(minutes=10))
        scenario.ttl = kept
        scenario.settings = dataclasses.replace(scenario.settings, retention=kept.retention)
        scenario.lookback_s = kept.lookback_s
    if "region_outage" in features:  # its own generator: a one-region seed plays as without
        scenario.regions, scenario.region_outages = regions.draw(seed, REGION, start, end)
    if "deploy_in_flight" in features:  # its own generators too
        deadline, policy = deploys.retry(seed)
        job = SimJob(
            deploys.DEPLOYED, "", zone, "allow", True, deadline, policy, (5, 60), 0.05, 0.03
        )
        scenario.deploys = deploys.draw(seed, start, end, job)
    return scenario


def _windowed(
    rng: random.Random, jobs: list[SimJob], start: datetime, end: datetime
) -> list[SimJob]:
    """Most seeds give one or two jobs an active window that opens, closes, or both, mid-run.

    A bound falls on a whole minute half the time, so on a scheduled time itself (both
    ends are inside), else between two.
    """
    if rng.random() >= 0.7:
        return jobs
    chosen = set(rng.sample([job.id for job in jobs], rng.randint(1, 2)))

    def bound(earliest: datetime, latest: datetime) -> datetime:
        at = earliest + timedelta(seconds=rng.randint(0, int((latest - earliest).total_seconds())))
        return at.replace(second=0) if rng.random() < 0.5 else at

    windowed = []
    for job in jobs:
        if job.id in chosen:
            shape = rng.choice(("opens", "closes", "both"))
            opens = bound(start, end - timedelta(minutes=40)) if shape != "closes" else None
            after = start + timedelta(minutes=10) if opens is None else opens
            closes = bound(after + timedelta(minutes=1), end) if shape != "opens" else None
            job = replace(job, start_at=opens, end_at=closes)
        windowed.append(job)
    return windowed


def _suspending(rng: random.Random, jobs: list[SimJob]) -> list[SimJob]:
    """Most seeds give one job `suspendAfterFailures` (1 to 3) and failures often enough
    to reach it: the operator suspends and resumes it too (`operator.draw`)."""
    if rng.random() >= 0.7:
        return jobs
    chosen = rng.choice([job.id for job in jobs])
    return [
        replace(job, suspend_after=rng.randint(1, 3), terminal=rng.choice((0.1, 0.25, 0.4)))
        if job.id == chosen
        else job
        for job in jobs
    ]


def moment(rng: random.Random, start: datetime, end: datetime) -> datetime:
    """A whole second between 20 minutes after `start` and `end` (or that, if it is later)."""
    seconds = rng.randint(0, max(0, int((end - start).total_seconds()) - 20 * 60))
    return start + timedelta(seconds=20 * 60 + seconds)
