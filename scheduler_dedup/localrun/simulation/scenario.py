"""What happens in one seed's world, drawn from the seed alone.

The stack: five jobs covering every overlap policy, catch-up on and off, local
time zones on a daylight-saving day (Europe/Berlin on the last Sundays of March
and October, America/New_York in March and November) or an ordinary one, and
the audit every ten minutes. The operator: forced runs with and without
ScheduleTime, pauses from the console (live state only) and from the stack (a
deploy), short and long, a console edit of a schedule and its undo, backfills
with and without --include-failed. The faults: the store's (`store.FaultPlan`),
outages, partitions of one instance, lost answers and duplicate deliveries,
clock skew within `MAX_CLOCK_SKEW` between instances, the deletion of the
audit's documents.

`FEATURES` names the fault classes whose fixes are still on their way: each is
on unless switched off (`Scenario` takes the set that is on), so a seed says
exactly what it exercised.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from runledger.config import ManualRuns, Settings
from runledger.facts import DEFAULT_PROJECT_HEADER, DEFAULT_REGION_HEADER, RetryPolicy
from runledger.ledger.machine import MAX_CLOCK_SKEW
from scheduler_dedup.localrun.simulation.regions import RegionOutage
from scheduler_dedup.localrun.simulation.regions import draw as regions_draw

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
    "region_outage": "the stack in two regions, one out for minutes to hours (its Scheduler "
    "stops, its function answers 5xx or times out, or loses the store), both delivering "
    "every time at the same instant",
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
    # Every region the stack runs in, the key region (`region`) first (`region_outage`).
    regions: tuple[str, ...] = (REGION,)
    region_outages: tuple[RegionOutage, ...] = ()


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
    regions, region_outages = (
        regions_draw(seed, REGION, start, end) if "region_outage" in features else ((REGION,), ())
    )
    return Scenario(
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
        regions=regions,
        region_outages=region_outages,
    )


def moment(rng: random.Random, start: datetime, end: datetime) -> datetime:
    """A whole second between 20 minutes after `start` and `end` (or that, if it is later)."""
    seconds = rng.randint(0, max(0, int((end - start).total_seconds()) - 20 * 60))
    return start + timedelta(seconds=20 * 60 + seconds)
