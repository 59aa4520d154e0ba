"""What the handler's audit costs from its watermarks: steady state, back to back, after an outage.

The handler's audit (`runledger.audit.runner.Audit` with `runledger.ledger.watermarks`)
reads each job's watermark shard and only the runs that settled since its last
audit. This sets up the ledger as a stack running for hours would have it:
epochs recorded at the deploy, watermarks where an audit `since` ago left them,
and a completed record for every run since but every `audit_cost.MISSING_EVERY`-th
(the audit reports those missed). Then it runs the handler's own audit once on
the real Firestore store, in-process on a counted client, and (at steady state)
at once a second time: that one finds no new run settled. Counts are taken at the client: every
document a BatchGet asked for (a billed read), every BatchGetDocuments call and
every written document.

After an outage the audit judges at most `audit.READ_BUDGET` runs; the rest wait
behind the watermark. Only the runs that first audit reads are seeded.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from google.cloud import firestore

from bench.audit_cost import LEASE, MISSING_EVERY, AuditSize, audit_settings, seed_completed
from bench.opcount import OpCounter
from bench.schedule import PROJECT, REGION
from runledger.audit.expected import ExpectedRun, schedule_times
from runledger.audit.runner import READ_BUDGET, Audit
from runledger.delivery.identify import run_key
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.watermarks import JobMark, LedgerMarks
from scheduler_dedup.localrun.rpccount import RpcCounter

# The stack's default audit schedule: every 30 minutes.
AUDIT_EVERY = timedelta(minutes=30)


@dataclass(frozen=True)
class SteadySize:
    """N jobs every `every_minutes`, audited `since` after the audit before (an outage if long)."""

    jobs: int
    every_minutes: int
    since: timedelta = AUDIT_EVERY

    @property
    def label(self) -> str:
        hours = self.since / timedelta(hours=1)
        gap = "steady state" if self.since == AUDIT_EVERY else f"after a {hours:g}-hour outage"
        return f"{self.jobs:,} jobs every {self.every_minutes} min, {gap}"


@dataclass(frozen=True)
class SteadyCost:
    jobs: int
    every_minutes: int
    audit: str  # "first" (the measured audit) or "back to back" (right after it)
    scheduled: int  # schedule times that settled since the previous audit: the floor of reads
    checked: int
    deferred: int
    expired: int  # settled runs that left the look-back before this audit: counted, not judged
    reads: int
    rpcs: int
    writes: int
    wall_s: float
    findings: int


def _frontier(runs: list[ExpectedRun], at: datetime) -> datetime | None:
    """The last instant a watermark can reach at `at`: the newest run settled by then."""
    settled = [run for run in runs if run.settles_at(LEASE) <= at]
    return settled[-1].instants[-1] if settled else None


def measure_steady(
    size: SteadySize,
    counted: firestore.Client,
    rpc: RpcCounter,
    ops: OpCounter,
    setup: firestore.Client,
) -> list[SteadyCost]:
    """Set the ledger up for `size`, then run the handler's audit twice, back to back."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    lookback = timedelta(hours=6)
    hours = lookback / timedelta(hours=1)
    settings = audit_settings(AuditSize(size.jobs, size.every_minutes, hours))
    collection = f"steady_{size.jobs}x{size.every_minutes}_{uuid.uuid4().hex[:8]}"
    deployed = now - lookback - timedelta(hours=1)
    before = now - size.since
    setup_store = FirestoreRunStore(setup, collection)
    marks = LedgerMarks(setup_store, PROJECT, REGION)
    marks.load(settings.schedules, deployed)  # records every job's epoch at the deploy
    share = max(READ_BUDGET // size.jobs, 1)
    seeded: list[tuple[str, ExpectedRun]] = []
    new_marks = {}
    scheduled = 0
    for job in settings.schedules:
        runs = schedule_times(job, deployed, now)
        judged_to = _frontier(runs, before)
        new_marks[job.id] = JobMark(job.schedule, job.time_zone, deployed, judged_to, ())
        floor = now - lookback if judged_to is None else max(judged_to, now - lookback)
        due = [run for run in runs if run.instants[-1] > floor and run.settles_at(LEASE) <= now]
        scheduled += len(due)
        seeded.extend((job.id, run) for run in due[:share])
    marks.save(new_marks)
    keyed = (
        (run_key(job, run.schedule_time, PROJECT, REGION, manual=False), job, run.schedule_time)
        for job, run in seeded
    )
    seed_completed(setup, collection, keyed, now)

    store = FirestoreRunStore(counted, collection)
    costs = []
    # After an outage the second audit goes on draining the backlog (not seeded): one audit.
    for which in ("first", "back to back")[: 2 if size.since == AUDIT_EVERY else 1]:
        audit = Audit(
            settings,
            lease=LEASE,
            read=store.get_many,
            clock=lambda: now,
            marks=LedgerMarks(store, PROJECT, REGION),
            emit=lambda findings: None,  # the bench counts reads, not log lines
        )
        rpc.reset()
        ops.reset()
        started = time.perf_counter()
        report = audit.run(lookback)
        wall = time.perf_counter() - started
        costs.append(
            SteadyCost(
                size.jobs,
                size.every_minutes,
                which,
                scheduled if which == "first" else 0,
                report.checked,
                report.deferred,
                report.expired,
                ops.reads,
                rpc.calls["batch_get_documents"],
                ops.writes,
                wall,
                len(report.findings),
            )
        )
    return costs


# Firestore Standard edition prices, us-central1 (other regions differ): $0.03 per
# 100,000 document reads and $0.09 per 100,000 writes, beyond the daily free quota
# (https://firebase.google.com/docs/firestore/standard-edition, "Billing and limits";
# https://cloud.google.com/firestore/pricing).
READ_USD = 0.03 / 100_000
WRITE_USD = 0.09 / 100_000
AUDITS_A_DAY = timedelta(days=1) / AUDIT_EVERY
# The bar for a steady-state audit: reads per scheduled run it judges.
READS_PER_RUN_TARGET = 1.1


def usd_per_1000_jobs_a_day(cost: dict[str, Any]) -> float:
    """What a day of audits like this one costs in reads and writes, per 1,000 jobs."""
    per_audit = cost["reads"] * READ_USD + cost["writes"] * WRITE_USD
    return per_audit * AUDITS_A_DAY * 1000 / cost["jobs"]


def section(
    data: dict[str, dict[str, list[Any]]] | None,
    table: Callable[[list[str], list[list[str]]], str],
    target: Callable[[str, str, bool], None],
) -> str:
    """The handler's audit from its watermarks: one row per audit measured, and its targets."""
    if not data:
        return ""
    rows = []
    for label, by_side in data.items():
        for cost in by_side["handler"]:
            per_run = cost["reads"] / cost["checked"] if cost["checked"] else None
            steady = label.endswith("steady state") and cost["audit"] == "first"
            rows.append(
                [
                    label,
                    cost["audit"],
                    f"{cost['scheduled']:,}",
                    f"{cost['checked']:,}",
                    f"{cost['deferred']:,}",
                    f"{cost['expired']:,}",
                    f"{cost['reads']:,}",
                    "-" if per_run is None else f"{per_run:.3f}",
                    str(cost["rpcs"]),
                    f"{cost['writes']:,}",
                    f"{cost['wall_s'] * 1000:,.0f}",
                    str(cost["findings"]),
                    f"${usd_per_1000_jobs_a_day(cost):.3f}" if steady else "-",
                ]
            )
            if steady and per_run is not None:
                target(
                    f"audit reads per scheduled run <= {READS_PER_RUN_TARGET} ({label})",
                    f"{per_run:.3f}",
                    per_run <= READS_PER_RUN_TARGET,
                )
            if cost["audit"] == "back to back":
                target(
                    f"back-to-back audit reads <= jobs ({label})",
                    f"{cost['reads']:,} for {cost['jobs']:,} jobs",
                    cost["reads"] <= cost["jobs"],
                )
    header = [
        "audit of",
        "audit",
        "runs settled since",
        "judged",
        "left for next",
        "left the look-back",
        "document reads",
        "reads / judged run",
        "BatchGet RPCs",
        "writes",
        "wall ms",
        "findings",
        "USD / 1,000 jobs / day",
    ]
    title = (
        "**Audit from watermarks** (the handler's audit): the ledger as a stack running for hours "
        f"has it, the previous audit {AUDIT_EVERY // timedelta(minutes=1)} minutes before (or "
        "hours before, the outage rows); one read per "
        "watermark shard and per run settled since, open findings read again; every "
        f"{MISSING_EVERY}th run has no record and is reported missed, once. At most "
        f"{READ_BUDGET:,} run reads an audit; the rest wait behind the watermark. Cost: "
        f"{AUDITS_A_DAY:g} audits a day at Firestore Standard, us-central1 prices "
        "($0.03 / 100k reads, $0.09 / 100k writes)"
    )
    return title + "\n\n" + table(header, rows)
