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
claimed the job, under that run's key. The slot is a step of the ledger's one
claim path (`SlotCommits`, the `ledger.commits.Commits` of a job with a policy),
not a ledger of its own: a run of a job with a policy claims its own record and
the slot in one commit, the slot guarded by the update time it was read at
(`OverlapStore.claim_slotted`); every later fenced write of the holder (each
lease renewal, a lost claim given up, the final outcome) writes both in one
commit (`OverlapStore.update_slotted`), the slot whole, so a slot deleted
meanwhile (the audit's documents are safe to delete) reads as free and comes
back with the holder's next write instead of fencing the holder out. So the
slot's copy of the holder's lease is the holder's lease, and of two runs
claiming at once exactly one commit lands: the other reads the slot again and
finds the first running. A run the audit starts (catch-up, backfill) that meets
a running holder writes nothing, whatever the policy: it stays pending for the
next audit (`Ledger._claim`). A holder counts as
running while `ledger.machine.may_take_over` would refuse a new attempt on its record:
in progress and its lease (plus the clock-skew margin) not over. A holder that
died therefore stops counting one lease after its last renewal; the run that
takes the slot over ends the dead holder's lease in the same commit, which also
moves that record's version, so a holder that was only cut off fails its next
fenced write (`LeaseLost`) instead of running on beside the new one. A paused
job sends no deliveries: its slot simply keeps its last holder's outcome.

Cost: one extra document read per delivery of a job with a policy (the slot),
and its writes ride in the commits the run makes anyway; a job with `allow`
writes its record alone (`ledger.commits.RecordCommits`; see `make bench`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from runledger.facts import OUTCOME_OVERLAP_DELAYED, OUTCOME_OVERLAP_SKIPPED, OVERLAP_ALLOW
from runledger.ledger.commits import Gate, RecordCommits
from runledger.ledger.machine import may_take_over
from runledger.ledger.record import RunRecord, Status
from runledger.ledger.run import RunIdentity, Yielded

# The slots live at AUDIT_COLLECTION/<ledger collection>/OVERLAP_COLLECTION/<slot key>.
OVERLAP_COLLECTION = "overlap"


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


@runtime_checkable
class OverlapStore(Protocol):
    """A RunStore that also keeps each job's slot and commits a run with it."""

    def get_slot(self, key: str) -> StoredSlot | None:
        """The slot and its version, or None if the job has none (never had, or deleted)."""

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
        self, run_key: str, changes: Mapping[str, Any], version: Any, key: str, slot: Slot
    ) -> Any:
        """Change the run at `version` and write its job's slot as `slot`, in one commit.

        The slot is written whole with no precondition (created if it is gone):
        only the run's own fence guards the commit. Returns the run's new
        version; VersionConflict if the run moved on (nothing written).
        """


class SlotCommits(RecordCommits):
    """The overlap step of the ledger's claim path: a job with a policy commits with its slot.

    Jobs with `allow` (absent from `policies`) write their record alone, as
    `RecordCommits` does; so does a `skipped` record (a run that yielded is no holder).
    """

    def __init__(self, store: Any, policies: Mapping[str, str]) -> None:
        if not isinstance(store, OverlapStore):
            raise TypeError(f"{type(store).__name__} cannot keep overlap slots")
        super().__init__(store)
        self._slots = store
        self._policies = {
            job: policy for job, policy in policies.items() if policy != OVERLAP_ALLOW
        }

    def policy(self, job: str) -> str:
        return self._policies.get(job, OVERLAP_ALLOW)

    def look(self, run: RunIdentity, now: datetime) -> Gate:
        if run.job not in self._policies:
            return Gate()
        stored = self._slots.get_slot(_key(run))
        holder = None if stored is None else stored.slot
        if holder is not None and holder.run_key != run.key and holder.running(now):
            return Gate(holder.run_key, holder.record, stored)
        return Gate(token=(stored, _dead_holder(holder, run.key, now)))

    def claim(self, run: RunIdentity, record: RunRecord, version: Any | None, gate: Gate) -> Any:
        if run.job not in self._policies or gate.holder_key is not None:
            return super().claim(run, record, version, gate)
        stored, ended = gate.token
        slot_version = None if stored is None else stored.version
        return self._slots.claim_slotted(run.key, record, version, _key(run), slot_version, ended)

    def fenced(
        self, run: RunIdentity, changes: Mapping[str, Any], version: Any, record: RunRecord
    ) -> Any:
        if run.job not in self._policies:
            return super().fenced(run, changes, version, record)
        return self._slots.update_slotted(
            run.key, changes, version, _key(run), Slot(run.key, record)
        )


def _key(run: RunIdentity) -> str:
    return slot_key(run.project, run.region, run.job)


def yielded_answer(result: Yielded, fields: dict[str, object]) -> tuple[int, str, str]:
    """Status, outcome and message for a run that gave way; the holder goes to the log line.

    skip answers 200: any 2xx ends Cloud Scheduler's retries of the run, which is
    recorded and never run. delay (and a run the audit started) answers 409: for
    an HTTP target Scheduler acknowledges only a 2xx, and any other answer is a
    failed attempt retried with backoff under the job's RetryConfig (Cloud
    Scheduler REST reference, `HttpTarget`; "Retry jobs"). 409 rather than a
    5xx: nothing failed, so the answer must not read as a server error in the
    logs or the runs metric.
    """
    holder = result.holder
    since = holder.schedule_time.isoformat()
    fields.update(
        yielded_to=result.holder_key,
        yielded_to_schedule_time=since,
        yielded_to_attempt=holder.attempt_id,
    )
    running = (
        f"its run of {since} is in progress under attempt {holder.attempt_id} "
        f"(lease until {holder.lease_expires.isoformat()})"
    )
    if result.record is not None:
        fields.update(attempt_id=result.record.attempt_id)
        return 200, OUTCOME_OVERLAP_SKIPPED, f"run skipped (overlap: skip): {running}; not run"
    return (
        409,
        OUTCOME_OVERLAP_DELAYED,
        f"run delayed (overlap: {result.policy}): {running}; retry later",
    )


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
