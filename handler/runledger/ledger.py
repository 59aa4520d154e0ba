"""The run ledger's state machine: claim a run, keep its lease, finish it once.

    (absent | expired | released | lease ran out) --claim--> in_progress
    in_progress --complete--> completed      (final)
    in_progress --fail------> failed         (final)
    in_progress --release---> released       (a retry may claim at once)

A claim is one atomic `create`; taking over an existing record is a
compare-and-set on the version that was read. Every later write by the
claimant is fenced by the version of its own last write, so an attempt
whose lease was taken over can never touch the newer attempt's record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from runledger.exceptions import LeaseLost, RecordExists, StoreUnavailable, VersionConflict
from runledger.record import FINAL_STATUSES, RunRecord, Status
from runledger.store import RunStore

# Instances' clocks may disagree by up to this much (Cloud Run hosts are
# NTP-synchronised to well under a second). A lease is only taken over once it
# has run out by this margin, so skew within the bound never yields two live
# leases.
MAX_CLOCK_SKEW = timedelta(seconds=2)
# Rounds of read-then-write while other attempts keep changing the record.
_CLAIM_ROUNDS = 5
_MAX_ERROR_CHARS = 1000


@dataclass(frozen=True)
class RunIdentity:
    """What makes two deliveries the same run; `key` is its fixed-length hash."""

    key: str
    job: str
    schedule_time: datetime
    project: str
    region: str
    manual: bool


@dataclass(frozen=True)
class Claim:
    """Proof that this attempt holds the run, valid while `version` is current."""

    identity: RunIdentity
    attempt_id: str
    version: Any
    lease_expires: datetime
    attempts: int


@dataclass(frozen=True)
class Duplicate:
    """The run is done, failed or held by another attempt: do not run the work."""

    status: Status
    record: RunRecord


ClaimResult = Claim | Duplicate


class Ledger:
    def __init__(
        self,
        store: RunStore,
        *,
        lease: timedelta,
        retention: timedelta,
        clock: Callable[[], datetime],
        new_attempt_id: Callable[[], str],
    ) -> None:
        self._store = store
        self.lease = lease
        self.retention = retention
        self._clock = clock
        self._new_attempt_id = new_attempt_id

    def now(self) -> datetime:
        return self._clock()

    @property
    def store(self) -> RunStore:
        """The store the ledger writes to; a run's checkpoints and outputs go there too."""
        return self._store

    def expire_at(self, schedule_time: datetime) -> datetime:
        """When a run's record, and everything kept with it, may be deleted by TTL."""
        return schedule_time + self.retention

    def claim(self, run: RunIdentity) -> ClaimResult:
        attempt_id = self._new_attempt_id()
        for _ in range(_CLAIM_ROUNDS):
            now = self._clock()
            fresh = self._fresh_record(run, attempt_id, now, attempts=1)
            try:
                version = self._store.create(run.key, fresh)
            except RecordExists:
                pass
            else:
                return self._claim_of(run, fresh, version)
            current = self._store.get(run.key)
            if current is None:
                continue  # deleted since our create; create again
            existing = current.record
            if existing.attempt_id == attempt_id:  # our create landed; its answer was lost
                return self._claim_of(run, existing, current.version)
            if not existing.is_expired(now):
                if existing.status in FINAL_STATUSES:
                    return Duplicate(existing.status, existing)
                if existing.status is Status.IN_PROGRESS and now < (
                    existing.lease_expires + MAX_CLOCK_SKEW
                ):
                    return Duplicate(Status.IN_PROGRESS, existing)
                fresh = replace(fresh, attempts=existing.attempts + 1)
            try:
                version = self._store.update(run.key, fresh.to_document(), current.version)
            except VersionConflict:
                continue  # another attempt moved first; look again
            return self._claim_of(run, fresh, version)
        raise StoreUnavailable(f"run {run.key} kept changing under concurrent claims")

    def renew(self, claim: Claim) -> Claim:
        lease_expires = self._clock() + self.lease
        version = self._fenced(claim, {"lease_expires": lease_expires})
        return replace(claim, version=version, lease_expires=lease_expires)

    def resync(self, claim: Claim) -> Claim:
        """Adopt the run's current version after a fenced write whose answer was lost.

        Only this attempt writes a record that carries its attempt_id, and while
        it is in_progress only our own renewals change it: such a record is still
        ours, and a lost-answer renewal that landed merely moved its version.
        """
        current = self._store.get(claim.identity.key)
        if current is None or (current.record.attempt_id, current.record.status) != (
            claim.attempt_id,
            Status.IN_PROGRESS,
        ):
            raise LeaseLost(f"attempt {claim.attempt_id} no longer holds run {claim.identity.key}")
        return replace(claim, version=current.version, lease_expires=current.record.lease_expires)

    def complete(self, claim: Claim) -> None:
        self._finish(claim, Status.COMPLETED, error=None)

    def release(self, claim: Claim, error: str) -> None:
        """Give a run back after a retryable failure so the next delivery claims it at once."""
        self._finish(claim, Status.RELEASED, error=error)

    def fail(self, claim: Claim, error: str) -> None:
        self._finish(claim, Status.FAILED, error=error)

    def _finish(self, claim: Claim, status: Status, error: str | None) -> None:
        changes = {
            "status": status.value,
            "finished_at": self._clock(),
            "error": None if error is None else error[:_MAX_ERROR_CHARS],
        }
        try:
            self._fenced(claim, changes)
        except LeaseLost:
            current = self._store.get(claim.identity.key)
            landed = current is not None and (
                current.record.attempt_id == claim.attempt_id and current.record.status is status
            )
            if not landed:  # otherwise our write landed and only its answer was lost
                raise

    def _fenced(self, claim: Claim, changes: dict[str, Any]) -> Any:
        try:
            return self._store.update(claim.identity.key, changes, claim.version)
        except VersionConflict as exc:
            raise LeaseLost(
                f"attempt {claim.attempt_id} no longer holds run {claim.identity.key}"
            ) from exc

    def _fresh_record(
        self, run: RunIdentity, attempt_id: str, now: datetime, attempts: int
    ) -> RunRecord:
        return RunRecord(
            status=Status.IN_PROGRESS,
            attempt_id=attempt_id,
            lease_expires=now + self.lease,
            expire_at=self.expire_at(run.schedule_time),
            job=run.job,
            schedule_time=run.schedule_time,
            project=run.project,
            region=run.region,
            manual=run.manual,
            attempts=attempts,
            claimed_at=now,
        )

    @staticmethod
    def _claim_of(run: RunIdentity, record: RunRecord, version: Any) -> Claim:
        return Claim(run, record.attempt_id, version, record.lease_expires, record.attempts)
