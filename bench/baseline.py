"""The baseline: the algorithm of the guide's sample handler, in this project's own code.

A delivery runs one Firestore transaction that reads the run's document and
claims it (unless it is completed or another attempt's lease is live), then
the job, then a second transaction that re-reads the document and, if this
attempt still owns it, marks it completed or deletes it after a failure.
Lease and retention are the same settings as the handler's.

Only the ledger differs from the handler: the run key, header checks and job
lookup come from the handler's own `runledger.delivery.identify.identify_run` and the
same DEDUP_* settings, so the comparison measures deduplication and nothing
else. As in the sample, the Firestore client is created at import time.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from google.cloud import firestore

from runledger.config import Settings
from runledger.delivery.identify import identify_run
from runledger.exceptions import BadRequest
from runledger.sdk.registry import load_jobs

CLAIMED = "claimed"
COMPLETED = "completed"
IN_PROGRESS = "in_progress"


@dataclass(frozen=True)
class BaselineRun:
    """What a job receives from the baseline: the same fields the bench jobs read."""

    run_id: str
    job_name: str
    schedule_time: datetime
    attempt_id: str
    body: bytes


@firestore.transactional
def _claim_in(
    transaction: firestore.Transaction,
    ref: firestore.DocumentReference,
    attempt_id: str,
    now: datetime,
    lease: timedelta,
    retention: timedelta,
) -> str:
    snapshot = ref.get(transaction=transaction)
    if snapshot.exists:
        current = snapshot.to_dict()
        if current["status"] == COMPLETED:
            return COMPLETED
        if current["lease_expires"] > now:
            return IN_PROGRESS
    transaction.set(
        ref,
        {
            "status": IN_PROGRESS,
            "attempt_id": attempt_id,
            "lease_expires": now + lease,
            "expire_at": now + retention,
        },
    )
    return CLAIMED


@firestore.transactional
def _finish_in(
    transaction: firestore.Transaction,
    ref: firestore.DocumentReference,
    attempt_id: str,
    succeeded: bool,
) -> None:
    snapshot = ref.get(transaction=transaction)
    if not snapshot.exists or snapshot.get("attempt_id") != attempt_id:
        return  # a later attempt took the run over after our lease ran out
    if succeeded:
        transaction.update(ref, {"status": COMPLETED})
    else:
        transaction.delete(ref)


class TransactionalLedger:
    """Claim and finish, each as one read-then-write Firestore transaction."""

    def __init__(
        self, client: firestore.Client, collection: str, lease: timedelta, retention: timedelta
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        self.lease = lease
        self.retention = retention

    def claim(self, key: str, attempt_id: str, now: datetime) -> str:
        """CLAIMED, or COMPLETED / IN_PROGRESS when the delivery is a duplicate."""
        ref = self._collection.document(key)
        return _claim_in(
            self._client.transaction(), ref, attempt_id, now, self.lease, self.retention
        )

    def finish(self, key: str, attempt_id: str, succeeded: bool) -> None:
        ref = self._collection.document(key)
        _finish_in(self._client.transaction(), ref, attempt_id, succeeded)


class BaselineApp:
    """One delivery in, (text, status) out, with the sample's status codes."""

    def __init__(
        self,
        settings: Settings,
        jobs: Mapping[str, Callable[[BaselineRun], Any]],
        client: firestore.Client,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        new_attempt_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self.settings = settings
        self.jobs = jobs
        self.ledger = TransactionalLedger(
            client, settings.collection, settings.lease, settings.retention
        )
        self._clock = clock
        self._new_attempt_id = new_attempt_id

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> BaselineApp:
        settings = Settings.from_env(env)
        client = firestore.Client(database=settings.database)
        return cls(settings, load_jobs(settings.jobs_module), client)

    def handle(self, headers: Iterable[tuple[str, str]], body: bytes = b"") -> tuple[str, int]:
        now = self._clock()
        try:
            run = identify_run(headers, self.settings, self.jobs, now)
        except BadRequest as exc:
            return exc.reason, exc.status
        attempt_id = self._new_attempt_id()
        state = self.ledger.claim(run.key, attempt_id, now)
        if state == COMPLETED:
            return "duplicate of a completed run; skipped", 200
        if state == IN_PROGRESS:
            return "run in progress", 409
        job_run = BaselineRun(run.key, run.job, run.schedule_time, attempt_id, body)
        try:
            self.jobs[run.job](job_run)
        except Exception:
            self.ledger.finish(run.key, attempt_id, succeeded=False)
            raise
        self.ledger.finish(run.key, attempt_id, succeeded=True)
        return "run processed", 200
