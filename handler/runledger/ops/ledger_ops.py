"""Operations on runs for `python -m runledger.ops`: find and list runs, release a dead letter.

Queries use equality filters only (`status`, `job`), which Firestore serves
from its automatic single-field indexes, so no composite index is needed;
ordering and the time conditions (lease ran out, TTL passed) are applied
here, over a collection the TTL keeps small. The time tests are pure functions
of a record and `now`, and the lease test is the ledger's own takeover rule.

Release is the one write, and the ledger makes it (`Ledger.release_failed`):
a failed run goes back to `released`, so the next delivery of that run claims
it at once and redoes it. It is fenced by the version read, in one commit with
any checkpoint deletions, so a run that changed since it was shown is left alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runledger.facts import DEFAULT_LEASE_S, DEFAULT_RETENTION_S, WORK_COLLECTION
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.machine import Ledger, ReleaseRefused, may_take_over, refuse_release
from runledger.ledger.record import RunRecord, Status, Versioned
from runledger.ledger.store import RunStore
from runledger.ledger.workitem import WorkItem, WorkKind

if TYPE_CHECKING:
    from google.cloud import firestore

# Operators' queries may scan more than a delivery reads; give them longer.
QUERY_TIMEOUT_S = 30.0
MIN_KEY_PREFIX = 8
RUN_KEY_CHARS = 64


class OpsError(Exception):
    """A one-line answer for the operator: unknown run, ambiguous key, refused release."""


@dataclass(frozen=True)
class RunRow:
    key: str
    record: RunRecord
    version: Any


@dataclass(frozen=True)
class ReleasePlan:
    """What `release` would write, shown before asking (and all a dry run does)."""

    row: RunRow
    checkpoints: list[str]


def is_stale(record: RunRecord, now: datetime) -> bool:
    """In progress, yet a new attempt may take it over: the attempt holding it is gone."""
    return (
        record.status is Status.IN_PROGRESS
        and not record.is_expired(now)
        and may_take_over(record, now)
    )


def is_dead_letter(record: RunRecord, now: datetime) -> bool:
    """Failed for good and still on record: nothing will run it again unless released."""
    return record.status is Status.FAILED and not record.is_expired(now)


def newest_first(rows: list[RunRow]) -> list[RunRow]:
    return sorted(rows, key=lambda row: (row.record.schedule_time, row.key), reverse=True)


class LedgerOps:
    def __init__(self, client: firestore.Client, collection: str) -> None:
        self._collection = client.collection(collection)
        self._store = FirestoreRunStore(client, collection)

    def runs(
        self,
        now: datetime,
        *,
        job: str | None = None,
        status: Status | None = None,
        include_expired: bool = False,
    ) -> list[RunRow]:
        from google.cloud.firestore import FieldFilter

        query: Any = self._collection
        if job is not None:
            query = query.where(filter=FieldFilter("job", "==", job))
        if status is not None:
            query = query.where(filter=FieldFilter("status", "==", status.value))
        rows = [self._row(snapshot) for snapshot in query.stream(timeout=QUERY_TIMEOUT_S)]
        if not include_expired:
            rows = [row for row in rows if not row.record.is_expired(now)]
        return newest_first(rows)

    def stale(self, now: datetime, job: str | None = None) -> list[RunRow]:
        rows = self.runs(now, job=job, status=Status.IN_PROGRESS)
        return [row for row in rows if is_stale(row.record, now)]

    def failed(self, now: datetime, job: str | None = None) -> list[RunRow]:
        rows = self.runs(now, job=job, status=Status.FAILED)
        return [row for row in rows if is_dead_letter(row.record, now)]

    def find(self, key: str) -> RunRow:
        """The run under `key`, or under the one key starting with it (at least 8 characters)."""
        key = key.strip().lower()
        if len(key) == RUN_KEY_CHARS:
            snapshot = self._collection.document(key).get(timeout=QUERY_TIMEOUT_S)
            if not snapshot.exists:
                raise OpsError(f"no run with key {key}")
            return self._row(snapshot)
        if len(key) < MIN_KEY_PREFIX or not all(c in "0123456789abcdef" for c in key):
            raise OpsError(
                f"{key!r} is not a run key or a prefix of at least {MIN_KEY_PREFIX} hex digits"
            )
        from google.cloud.firestore import FieldFilter
        from google.cloud.firestore_v1.field_path import FieldPath

        name = FieldPath.document_id()
        query = (
            self._collection.where(filter=FieldFilter(name, ">=", self._collection.document(key)))
            .where(filter=FieldFilter(name, "<", self._collection.document(key + "g")))
            .limit(2)
        )
        matches = list(query.stream(timeout=QUERY_TIMEOUT_S))
        if not matches:
            raise OpsError(f"no run with a key starting {key}")
        if len(matches) > 1:
            raise OpsError(f"more than one run key starts with {key}; give more digits")
        return self._row(matches[0])

    def work_items(self, key: str) -> list[WorkItem]:
        work = self._collection.document(key).collection(WORK_COLLECTION)
        items = [
            WorkItem.from_document(snapshot.to_dict())
            for snapshot in work.stream(timeout=QUERY_TIMEOUT_S)
        ]
        return sorted(items, key=lambda item: (item.written_at, item.kind.value, item.name))

    def plan_release(self, key: str, now: datetime, clear_checkpoints: bool) -> ReleasePlan:
        row = self.find(key)
        try:
            refuse_release(row.key, row.record, now)
        except ReleaseRefused as exc:
            raise OpsError(str(exc)) from exc
        checkpoints = []
        if clear_checkpoints:
            checkpoints = [
                item.name for item in self.work_items(row.key) if item.kind is WorkKind.CHECKPOINT
            ]
        return ReleasePlan(row, checkpoints)

    def release(self, plan: ReleasePlan, now: datetime, operator_note: str) -> None:
        """Apply a plan if the run is still exactly as it was read; raise OpsError if not."""
        seen = Versioned(plan.row.record, plan.row.version)
        release_run(self._store, plan.row.key, seen, now, operator_note, plan.checkpoints)

    @staticmethod
    def _row(snapshot: Any) -> RunRow:
        return RunRow(
            snapshot.id, RunRecord.from_document(snapshot.to_dict()), snapshot.update_time
        )


def release_run(
    store: RunStore,
    key: str,
    seen: Versioned,
    now: datetime,
    operator_note: str,
    checkpoints: Sequence[str] = (),
) -> None:
    """Release the failed run `key` if it is still exactly `seen`; raise OpsError if not.

    The one write of `release`, on any store (the simulator's operator makes it too).
    """
    # A release neither claims nor renews: the lease and retention given
    # here (the handler's defaults) are never used.
    ledger = Ledger(
        store,
        lease=timedelta(seconds=DEFAULT_LEASE_S),
        retention=timedelta(seconds=DEFAULT_RETENTION_S),
        clock=lambda: now,
        new_attempt_id=lambda: uuid.uuid4().hex,
    )
    try:
        ledger.release_failed(key, seen, operator_note, checkpoints)
    except ReleaseRefused as exc:
        raise OpsError(str(exc)) from exc
