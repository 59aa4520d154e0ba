"""The ledger document for one scheduled run.

Field names are a stable contract: operators query them, the TTL policy
targets `expire_at`, and other tools read the same documents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

from runledger.facts import TRIGGER_SCHEDULED
from runledger.ledger.document import Document


class Status(StrEnum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    # A retryable failure gave the run back; the next delivery may claim it at once.
    RELEASED = "released"
    # Deliberately not run: another run of its job was in progress (`runledger.ledger.overlap`).
    SKIPPED = "skipped"
    # Deliberately not run: its job was suspended (`runledger.ledger.suspension`).
    SUSPENDED = "suspended"


FINAL_STATUSES = frozenset({Status.COMPLETED, Status.FAILED, Status.SKIPPED, Status.SUSPENDED})
# A final status of a run that was never run, on purpose: never a finding, never caught up.
NOT_RUN_STATUSES = frozenset({Status.SKIPPED, Status.SUSPENDED})


@dataclass(frozen=True)
class RunRecord(Document):
    ENUM_FIELDS: ClassVar[Mapping[str, type[StrEnum]]] = {"status": Status}

    status: Status
    attempt_id: str
    lease_expires: datetime
    expire_at: datetime
    job: str
    schedule_time: datetime
    project: str
    region: str
    manual: bool
    attempts: int
    claimed_at: datetime
    finished_at: datetime | None = None
    error: str | None = None
    # What started the attempt that wrote the record (facts.TRIGGERS); older records: scheduled.
    trigger: str = TRIGGER_SCHEDULED
    # A skipped run's: the run key of the run of its job it yielded to.
    yielded_to: str | None = None
    # 0: the scheduled time's own run; N: its Nth rerun (`backfill --only all`).
    generation: int = 0
    # The dead letter published for this attempt's final failure (`delivery.dead_letter`):
    # its id and when its publish was answered; absent until then.
    dead_letter_id: str | None = None
    dead_lettered_at: datetime | None = None
    # The region whose Scheduler delivered the attempt that wrote the record (None: the
    # audit started it, or an older record); `region` is the region its key hashes.
    delivered_region: str | None = None

    def is_expired(self, now: datetime) -> bool:
        """Past `expire_at` the record is as good as absent: TTL deletion is lazy."""
        return self.expire_at <= now


@dataclass(frozen=True)
class Versioned:
    """A record with the store's version of it, the token fenced writes compare."""

    record: RunRecord
    version: Any
