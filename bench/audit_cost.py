"""What one audit costs: documents read, BatchGetDocuments calls and wall time, N jobs x window.

The audit (`runledger.audit.runner.Audit`) reads each job's epoch (one batch) and one
document per settled schedule time, by key, in batches of `audit.BATCH`; a
larger audit than `expected.MAX_READS` is refused before it reads anything. The
epochs are recorded before the window, as by a stack deployed earlier, so the
whole window is judged. This runs the
handler's own Audit on the real Firestore store, in-process on a counted
client, against a collection seeded with a completed record for every
expected run but every 50th (those are missing: the audit reports them, and a
read of a missing document is billed like any other).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from google.cloud import firestore

from bench.opcount import OpCounter
from bench.schedule import PROJECT, REGION
from runledger.audit.expected import MAX_READS, AuditTooLarge, expected_runs
from runledger.audit.runner import Audit
from runledger.ledger.epochs import read_epochs, record_epochs
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.record import RunRecord, Status
from runledger.schedules import AuditSettings, parse_schedules
from scheduler_dedup.localrun.rpccount import RpcCounter

# The jobs' timing: Cloud Scheduler's default 180 s deadline, no retries; the bench's lease.
RETRY_WINDOW_S = 180
LEASE = timedelta(seconds=300)
RETENTION = timedelta(days=1)
# Every this many expected runs one has no record: the audit reports it missed.
MISSING_EVERY = 50
# Firestore takes at most 500 writes in one commit.
_SEED_BATCH = 500


@dataclass(frozen=True)
class AuditSize:
    """N jobs, each firing every `every_minutes` minutes, audited over `window_hours`."""

    jobs: int
    every_minutes: int
    window_hours: float

    @property
    def label(self) -> str:
        return f"{self.jobs} jobs every {self.every_minutes} min, {self.window_hours:g} h"

    @property
    def schedule_times(self) -> int:
        """Schedule times in the window: jobs x window / period (a UTC */N schedule)."""
        return self.jobs * round(self.window_hours * 60 / self.every_minutes)


@dataclass(frozen=True)
class AuditCost:
    jobs: int
    every_minutes: int
    window_hours: float
    expected_runs: int  # schedule times in the window, settled or not
    checked: int  # settled ones, the ones read (0 when refused)
    reads: int  # documents requested (billed reads: epochs and runs), counted at the client
    rpcs: int  # BatchGetDocuments calls (one for the epochs), counted at the client
    wall_s: float
    findings: int
    refused: str | None  # the AuditTooLarge message, when the audit would exceed MAX_READS


def audit_settings(size: AuditSize) -> AuditSettings:
    """The size's jobs, through the same DEDUP_SCHEDULES parser the handler uses."""
    entries = [
        {
            "id": f"audit-bench-{index:03d}",
            "schedule": f"*/{size.every_minutes} * * * *",
            "timeZone": "UTC",
            "retryWindowSeconds": RETRY_WINDOW_S,
        }
        for index in range(size.jobs)
    ]
    schedules = parse_schedules(json.dumps(entries))
    return AuditSettings(schedules, timedelta(hours=size.window_hours), PROJECT, REGION)


def seed_completed(
    client: firestore.Client,
    collection: str,
    runs: Iterable[tuple[str, str, datetime]],
    now: datetime,
) -> int:
    """A completed record for each (key, job, schedule time) but every MISSING_EVERY-th.

    Returns how many were written; the skipped ones are the runs the audit must
    report missed.
    """
    batch = client.batch()
    pending = written = 0
    for index, (key, job, schedule_time) in enumerate(runs):
        if index % MISSING_EVERY == MISSING_EVERY - 1:
            continue
        record = RunRecord(
            status=Status.COMPLETED,
            attempt_id=uuid.uuid4().hex,
            lease_expires=schedule_time + LEASE,
            expire_at=now + RETENTION,
            job=job,
            schedule_time=schedule_time,
            project=PROJECT,
            region=REGION,
            manual=False,
            attempts=1,
            claimed_at=schedule_time,
            finished_at=schedule_time + timedelta(seconds=1),
        )
        batch.set(client.collection(collection).document(key), record.to_document())
        pending += 1
        written += 1
        if pending == _SEED_BATCH:
            batch.commit()
            batch, pending = client.batch(), 0
    if pending:
        batch.commit()
    return written


def seed(
    client: firestore.Client, collection: str, audit: Audit, settings: AuditSettings, now: datetime
) -> int:
    """Write a completed record for every settled expected run but every MISSING_EVERY-th."""
    runs = expected_runs(settings.schedules, now - settings.lookback, now)
    settled = [run for run in runs if run.settles_at(LEASE) <= now]
    keyed = (
        (audit.identity(run.job.id, run.schedule_time).key, run.job.id, run.schedule_time)
        for run in settled
    )
    return seed_completed(client, collection, keyed, now)


def measure_audit(
    size: AuditSize,
    counted: firestore.Client,
    rpc: RpcCounter,
    ops: OpCounter,
    setup: firestore.Client,
    reps: int,
) -> list[AuditCost]:
    """Seed a fresh collection for `size`, then run the audit `reps` times on it."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    collection = f"audit_{size.jobs}x{size.every_minutes}_{uuid.uuid4().hex[:8]}"
    settings = audit_settings(size)
    store = FirestoreRunStore(counted, collection)
    audit = Audit(
        settings,
        lease=LEASE,
        read=store.get_many,
        clock=lambda: now,
        # Recorded below: the handler's audit would only read them now.
        epochs=lambda jobs, _now: read_epochs(store, PROJECT, REGION, jobs),
    )
    if size.schedule_times <= MAX_READS:  # a larger audit is refused unread: nothing to seed
        seed(setup, collection, audit, settings, now)
        deployed = now - settings.lookback - timedelta(hours=1)
        setup_store = FirestoreRunStore(setup, collection)
        record_epochs(setup_store, PROJECT, REGION, settings.schedules, deployed)
    costs = []
    for _ in range(reps):
        rpc.reset()
        ops.reset()
        refused = None
        checked = findings = 0
        started = time.perf_counter()
        try:
            report = audit.run()
            checked, findings = report.checked, len(report.findings)
        except AuditTooLarge as exc:
            refused = str(exc)
        wall = time.perf_counter() - started
        costs.append(
            AuditCost(
                size.jobs,
                size.every_minutes,
                size.window_hours,
                size.schedule_times,
                checked,
                ops.reads,
                rpc.calls["batch_get_documents"],
                wall,
                findings,
                refused,
            )
        )
    return costs
