"""The overlap policy: what a delivery does while another run of its job is in progress.

Deduplication makes each scheduled time run once; it does not stop run 11:00
from starting while run 10:00 still works (a job longer than its interval, or
past its attempt deadline, which ends Cloud Scheduler's one outstanding attempt
but not the work). A job's `overlap` (DEDUP_SCHEDULES, `runledger.schedules`):

    allow   run it anyway (the default; the job pays nothing for this module)
    skip    record the run `skipped`, naming the run it yielded to, and answer 2xx:
            it is deliberately not run, now or later
    delay   write nothing and answer 409, which Cloud Scheduler retries like any
            non-2xx answer; a run whose retries run out is an ordinary missed or
            released finding the audit's catch-up can redo

"In progress" is decided by one document per job, its slot, kept beside the
audit's epochs (never among the runs): a copy of the record of the run that last
claimed the job, under that run's key. A run of a job with a policy claims its
own record and the slot in one commit, the slot guarded by the update time it
was read at (`OverlapStore.claim_slotted`); every later fenced write of the
holder (each lease renewal, the final outcome) changes both in one commit
(`OverlapStore.update_slotted`). So the slot's copy of the holder's lease is the
holder's lease, and of two runs claiming at once exactly one commit lands: the
other reads the slot again and finds the first running. A holder counts as
running while `ledger.machine.may_take_over` would refuse a new attempt on its record:
in progress and its lease (plus the clock-skew margin) not over. A holder that
died therefore stops counting one lease after its last renewal; the run that
takes the slot over ends the dead holder's lease in the same commit, which also
moves that record's version, so a holder that was only cut off fails its next
fenced write (`LeaseLost`) instead of running on beside the new one. A paused
job sends no deliveries: its slot simply keeps its last holder's outcome.

Cost: one extra document read per delivery of a job with a policy (the slot),
and its writes ride in the commits the run makes anyway; a job with `allow`
takes the plain `Ledger` path (see `make bench`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from runledger.exceptions import LeaseLost, RecordExists, StoreUnavailable, VersionConflict
from runledger.facts import OUTCOME_OVERLAP_DELAYED, OUTCOME_OVERLAP_SKIPPED, OVERLAP_ALLOW
from runledger.ledger.machine import (
    Claim,
    ClaimResult,
    Duplicate,
    Ledger,
    RunIdentity,
    claim_of,
    fresh_record,
    may_take_over,
)
from runledger.ledger.record import RunRecord, Status, Versioned

SKIP = "skip"
DELAY = "delay"
# The slots live at AUDIT_COLLECTION/<ledger collection>/OVERLAP_COLLECTION/<slot key>.
OVERLAP_COLLECTION = "overlap"
# Rounds of read-then-commit while other runs of the job keep moving its slot.
_ROUNDS = 5


def slot_key(project: str, region: str, job: str) -> str:
    """The job's slot document id: fixed length, whatever the job id (as epochs are keyed)."""
    canonical = "\n".join(["overlap-v1", project, region, job])
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Slot:
    """The run that last claimed its job, as its record stood at its last fenced write."""

    run_key: str
    record: RunRecord

    def to_document(self) -> dict[str, Any]:
        return {**self.record.to_document(), "run_key": self.run_key}

    @classmethod
    def from_document(cls, data: dict[str, Any]) -> Slot:
        return cls(data["run_key"], RunRecord.from_document(data))

    def running(self, now: datetime) -> bool:
        """Whether the holder still counts as running: the ledger's takeover rule refuses."""
        return self.record.status is Status.IN_PROGRESS and not may_take_over(self.record, now)


@dataclass(frozen=True)
class StoredSlot:
    slot: Slot
    version: Any


@dataclass(frozen=True)
class Yielded:
    """The run was not claimed: another run of its job holds the slot.

    record: the `skipped` record written (skip), or None (delay: nothing written).
    """

    policy: str
    holder: Slot
    record: RunRecord | None


@runtime_checkable
class OverlapStore(Protocol):
    """A RunStore that also keeps each job's slot and commits a run with it."""

    def get_slot(self, key: str) -> StoredSlot | None:
        """The slot and its version, or None if the job has none yet."""

    def claim_slotted(
        self,
        run_key: str,
        record: RunRecord,
        run_version: Any | None,
        key: str,
        slot_version: Any | None,
        ended: str | None,
    ) -> Any:
        """In one commit: the run's record, the slot naming it, and the end of `ended`'s lease.

        The record is created (run_version None) or replaced at run_version; the
        slot, a copy of the record under `run_key`, is created (slot_version None)
        or replaced at slot_version; `ended`, a dead holder's run key, gets its
        lease_expires set to the record's claimed_at. Returns the run's new
        version. Raises VersionConflict if any of it was refused (nothing written).
        """

    def update_slotted(
        self, run_key: str, changes: Mapping[str, Any], version: Any, key: str
    ) -> Any:
        """Change the run at `version` and its job's slot alike, in one commit.

        Returns the run's new version; VersionConflict if the run moved on (nothing
        written).
        """


def yielded_answer(result: Yielded, fields: dict[str, object]) -> tuple[int, str, str]:
    """Status, outcome and message for a delivery that gave way; the holder goes to the log line.

    skip answers 200: any 2xx ends Cloud Scheduler's retries of the run, which is
    recorded and never run. delay answers 409: for an HTTP target Scheduler
    acknowledges only a 2xx, and any other answer is a failed attempt retried
    with backoff under the job's RetryConfig (Cloud Scheduler REST reference,
    `HttpTarget`; "Retry jobs"). 409 rather than a 5xx: nothing failed, so the
    answer must not read as a server error in the logs or the runs metric.
    """
    holder = result.holder
    since = holder.record.schedule_time.isoformat()
    fields.update(
        yielded_to=holder.run_key,
        yielded_to_schedule_time=since,
        yielded_to_attempt=holder.record.attempt_id,
    )
    running = (
        f"its run of {since} is in progress under attempt {holder.record.attempt_id} "
        f"(lease until {holder.record.lease_expires.isoformat()})"
    )
    if result.record is not None:
        fields.update(attempt_id=result.record.attempt_id)
        return 200, OUTCOME_OVERLAP_SKIPPED, f"run skipped (overlap: skip): {running}; not run"
    return 409, OUTCOME_OVERLAP_DELAYED, f"run delayed (overlap: delay): {running}; retry later"


class OverlapLedger(Ledger):
    """The ledger, with the slot in every claim and fenced write of a job with a policy.

    Jobs with `allow` (absent from `policies`) go through `Ledger` unchanged.
    """

    def __init__(self, store: Any, *, policies: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(store, **kwargs)
        self.policies = {job: policy for job, policy in policies.items() if policy != OVERLAP_ALLOW}

    def claim(self, run: RunIdentity) -> ClaimResult | Yielded:  # type: ignore[override]
        """`Ledger.claim`, or for a job with a policy: claim with its slot, or yield."""
        policy = self.policies.get(run.job)
        if policy is None:
            return super().claim(run)
        attempt_id = self._new_attempt_id()
        try:
            return self._claim_slotted(self._slots(), run, attempt_id, policy)
        except StoreUnavailable as exc:
            if type(exc) is not StoreUnavailable:
                raise  # denied or unusable: the commit did not happen
            raise StoreUnavailable(
                f"{exc}; {self._give_up(run, attempt_id)} (its job's overlap slot "
                f"names it until that lease would have ended)"
            ) from exc

    def _claim_slotted(
        self, store: OverlapStore, run: RunIdentity, attempt_id: str, policy: str
    ) -> ClaimResult | Yielded:
        key = slot_key(run.project, run.region, run.job)
        current: Versioned | None = None
        for _ in range(_ROUNDS):
            now = self._clock()
            stored = store.get_slot(key)
            holder = None if stored is None else stored.slot
            if holder is not None and holder.run_key != run.key and holder.running(now):
                return self._yield(run, attempt_id, policy, holder, now)
            fresh = fresh_record(
                run, attempt_id, now, self._lease_ends(now), self.expire_at(run.schedule_time)
            )
            if current is not None:
                existing = current.record
                if existing.attempt_id == attempt_id:  # our commit landed; its answer was lost
                    return claim_of(run, existing, current.version)
                if not may_take_over(existing, now):
                    return Duplicate(existing.status, existing)
                if not existing.is_expired(now):
                    fresh = replace(fresh, attempts=existing.attempts + 1)
            try:
                version = store.claim_slotted(
                    run.key,
                    fresh,
                    None if current is None else current.version,
                    key,
                    None if stored is None else stored.version,
                    _dead_holder(holder, run.key, now),
                )
            except VersionConflict:
                # The run exists (or moved on), or the slot moved: look at both again.
                current = self._store.get(run.key)
                continue
            return claim_of(run, fresh, version)
        raise StoreUnavailable(f"run {run.key} kept changing under concurrent claims of its job")

    def _yield(
        self, run: RunIdentity, attempt_id: str, policy: str, holder: Slot, now: datetime
    ) -> ClaimResult | Yielded:
        """Give way to the running holder: record the run skipped, or (delay) write nothing.

        A run that already has a record keeps it where the takeover rule says so
        (done, failed, or held by another delivery of it): this delivery is that
        record's duplicate. A released or dead run of a `skip` job is skipped now.
        """
        if policy == DELAY:
            return Yielded(policy, holder, None)
        skipped = RunRecord(
            status=Status.SKIPPED,
            attempt_id=attempt_id,
            lease_expires=now,
            expire_at=self.expire_at(run.schedule_time),
            job=run.job,
            schedule_time=run.schedule_time,
            project=run.project,
            region=run.region,
            manual=run.manual,
            attempts=1,
            claimed_at=now,
            finished_at=now,
            trigger=run.trigger,
            yielded_to=holder.run_key,
        )
        for _ in range(_ROUNDS):
            try:
                self._store.create(run.key, skipped)
            except RecordExists:
                pass
            else:
                return Yielded(policy, holder, skipped)
            current = self._store.get(run.key)
            if current is None:
                continue
            existing = current.record
            if existing.attempt_id == attempt_id:  # our create landed; its answer was lost
                return Yielded(policy, holder, existing)
            if not may_take_over(existing, now):
                return Duplicate(existing.status, existing)
            if not existing.is_expired(now):
                skipped = replace(skipped, attempts=existing.attempts + 1)
            try:
                self._store.update(run.key, skipped.to_document(), current.version)
            except VersionConflict:
                continue
            return Yielded(policy, holder, skipped)
        raise StoreUnavailable(f"run {run.key} kept changing while it was being skipped")

    def _fenced(self, claim: Claim, changes: dict[str, Any]) -> Any:
        """`Ledger._fenced`; for a job with a policy the slot takes the same changes."""
        if claim.identity.job not in self.policies:
            return super()._fenced(claim, changes)
        run = claim.identity
        try:
            return self._slots().update_slotted(
                run.key, changes, claim.version, slot_key(run.project, run.region, run.job)
            )
        except VersionConflict as exc:
            raise LeaseLost(f"attempt {claim.attempt_id} no longer holds run {run.key}") from exc

    def _slots(self) -> OverlapStore:
        if not isinstance(self._store, OverlapStore):
            raise TypeError(f"{type(self._store).__name__} cannot keep overlap slots")
        return self._store


def skipped(records: Sequence[RunRecord]) -> bool:
    """Whether a scheduled time's records say it was skipped: deliberately not run."""
    return any(record.status is Status.SKIPPED for record in records)


def _dead_holder(holder: Slot | None, run_key: str, now: datetime) -> str | None:
    """The run key whose lease a slot takeover ends: another run's record still in progress.

    A record past its expire_at may be gone already (TTL), and a run's own
    record is replaced by the claim itself.
    """
    if holder is None or holder.run_key == run_key:
        return None
    record = holder.record
    if record.status is not Status.IN_PROGRESS or record.is_expired(now):
        return None
    return holder.run_key
