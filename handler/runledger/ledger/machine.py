"""The run ledger's state machine: claim a run, keep its lease, finish it once.

    (absent | expired | released | lease ran out) --claim--> in_progress
    in_progress --complete--> completed      (final)
    in_progress --fail------> failed         (final)
    in_progress --release---> released       (a retry may claim at once)
    failed --operator release--> released    (`python -m runledger.ops release`)
    absent | free --claim, another run of a `skip` job live--> skipped (final)
    absent | free --delivery, its job suspended--> suspended (final)

A claim is one atomic `create`; taking over an existing record is a
compare-and-set on the version that was read. Every later write by the
claimant is fenced by the version of its own last write, so an attempt
whose lease was taken over can never touch the newer attempt's record.
`Ledger` makes every one of these writes, the run's checkpoints and outputs
included, so the takeover rule and the "still ours" test exist once. Every
claim and fenced write goes through one `ledger.commits.Commits`, which for a
job with an overlap policy writes its slot in the same commit
(`ledger.overlap.SlotCommits`): one claim path for every trigger.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, cast

from runledger.exceptions import LeaseLost, RecordExists, StoreUnavailable, VersionConflict
from runledger.facts import AUDIT_TRIGGERS, OVERLAP_DELAY
from runledger.ledger.commits import Commits, RecordCommits
from runledger.ledger.record import FINAL_STATUSES, RunRecord, Status, Versioned
from runledger.ledger.run import (
    Claim,
    ClaimResult,
    Duplicate,
    RunIdentity,
    Yielded,
    fresh_record,
    skipped_record,
    suspended_record,
)
from runledger.ledger.store import RunStore, WorkStore
from runledger.ledger.suspension import (
    Suspension,
    SuspensionStore,
    change,
    counted,
    suspension_key,
)
from runledger.ledger.suspension import read as read_suspension
from runledger.ledger.watermarks import AuditStore, LedgerMarks
from runledger.ledger.workitem import StoredItem, WorkItem, WorkKind, item_id

# Instances' clocks may disagree by up to this much (Cloud Run hosts are
# NTP-synchronised to well under a second). A lease is only taken over once it
# has run out by this margin, so skew within the bound never yields two live
# leases.
MAX_CLOCK_SKEW = timedelta(seconds=2)
# Rounds of read-then-write while other attempts keep changing the record.
_CLAIM_ROUNDS = 5
# A work item write refused only because our claim's version was behind our
# own last write is tried once more at the version read back.
_ITEM_WRITE_ROUNDS = 2
_MAX_ERROR_CHARS = 1000


def may_take_over(record: RunRecord, now: datetime) -> bool:
    """The takeover rule: whether a new attempt may claim the run this record holds.

    Past `expire_at` the record counts as absent; a final record stays final; a
    released run is free at once; an in-progress one only once its lease ran out
    by more than the clock skew, so skew within the bound never yields two live
    leases.
    """
    if record.is_expired(now):
        return True
    if record.status in FINAL_STATUSES:
        return False
    return record.status is not Status.IN_PROGRESS or record.lease_expires + MAX_CLOCK_SKEW <= now


class ReleaseRefused(Exception):
    """An operator release the ledger will not write; the message says why, in one line."""


def refuse_release(key: str, record: RunRecord, now: datetime) -> None:
    """Raise ReleaseRefused unless an operator may give the run back: failed, not expired."""
    if record.status is not Status.FAILED:
        raise ReleaseRefused(f"run {key} is {record.status.value}, not failed: nothing to release")
    if record.is_expired(now):
        raise ReleaseRefused(f"run {key} is past its expire_at: a new delivery starts it afresh")


def _finish_changes(status: Status, now: datetime, error: str | None) -> dict[str, Any]:
    """The fields a final or released write sets; the error text trimmed to what a record keeps."""
    return {
        "status": status.value,
        "finished_at": now,
        "error": None if error is None else error[:_MAX_ERROR_CHARS],
    }


def _lease_still_ours(record: RunRecord, claim: Claim, now: datetime) -> bool:
    """Whether the attempt's record, read after a refused write, is still its own to end.

    Only the attempt renews its lease, and a renewal only moves it later; a takeover
    of the job's slot ends it at the taker's claim time (`overlap`), and a takeover of
    the run writes another attempt id. A lease past the claim's and past the clocks'
    skew from now was moved by nobody else.
    """
    return (
        record.status is Status.IN_PROGRESS
        and record.lease_expires >= claim.lease_expires
        and record.lease_expires > now + MAX_CLOCK_SKEW
    )


class Ledger:
    def __init__(
        self,
        store: RunStore,
        *,
        lease: timedelta,
        retention: timedelta,
        clock: Callable[[], datetime],
        new_attempt_id: Callable[[], str],
        heartbeat: timedelta | None = None,
        commits: Commits | None = None,
    ) -> None:
        self._store = store
        # Where the run's writes go (None: its record alone, every job `allow`).
        self._commits = RecordCommits(store) if commits is None else commits
        # The longest one request can hold a run (covers the request timeout) ...
        self.lease = lease
        # ... and the lease a claim takes and each renewal grants (runledger.ledger.lease).
        self.claim_lease = lease if heartbeat is None else heartbeat
        self.retention = retention
        self._clock = clock
        self._new_attempt_id = new_attempt_id

    def now(self) -> datetime:
        return self._clock()

    def read(self, key: str) -> RunRecord | None:
        """The run's record as stored, for callers that only look at it."""
        found = self._store.get(key)
        return found.record if found else None

    def read_versioned(self, key: str) -> Versioned | None:
        """The run's record and its version, for a fenced write that follows (backfill)."""
        return self._store.get(key)

    def read_many(self, keys: Sequence[str]) -> dict[str, RunRecord]:
        """The records among `keys` that exist, in one round trip (the audit's read)."""
        return self._store.get_many(keys)

    def audit_marks(self, project: str, region: str) -> LedgerMarks:
        """The audit's watermarks (`ledger.watermarks`), for one audit to load and save."""
        if not isinstance(self._store, AuditStore):
            raise TypeError(f"{type(self._store).__name__} cannot keep audit watermarks")
        return LedgerMarks(self._store, project, region)

    def expire_at(self, schedule_time: datetime) -> datetime:
        """When a run's record, and everything kept with it, may be deleted by TTL."""
        return schedule_time + self.retention

    def claim(self, run: RunIdentity) -> ClaimResult:
        """Claim the run for a new attempt, or say why not (a Duplicate, or Yielded).

        One path for every trigger: the job's overlap slot (`Commits.look`) is read
        and written in the claim's own commit. A claim write whose answer was
        lost may have landed: before the StoreUnavailable goes up, this attempt
        gives its claim up if it did (`_give_up`), so the run (and its job's
        slot) is not blocked for a whole lease by an attempt that will never run.
        """
        attempt_id = self._new_attempt_id()
        try:
            return self._claim(run, attempt_id)
        except StoreUnavailable as exc:
            if type(exc) is not StoreUnavailable:
                raise  # denied or unusable: the write did not happen
            raise StoreUnavailable(f"{exc}; {self._give_up(run, attempt_id)}") from exc

    def _give_up(self, run: RunIdentity, attempt_id: str) -> str:
        """End this attempt's lease now if its claim landed; say what was done, for the log.

        The lease is ended rather than the run released, so the takeover rule
        stays the one of any ended lease (after the clock-skew margin). Fenced by
        the version read: a newer attempt's record is never touched; the job's
        slot takes the ended lease in the same commit.
        """
        try:
            current = self._store.get(run.key)
            if current is None or (current.record.attempt_id, current.record.status) != (
                attempt_id,
                Status.IN_PROGRESS,
            ):
                return "the claim did not land"
            self._fenced(
                Claim(run, current.record, current.version), {"lease_expires": self._clock()}
            )
        except (StoreUnavailable, LeaseLost):
            return (
                f"the claim may have landed and could not be given up: it blocks the run "
                f"for at most {int(self.claim_lease.total_seconds())} s"
            )
        return "the claim had landed and was given up"

    def _claim(self, run: RunIdentity, attempt_id: str) -> ClaimResult:
        """Read (slot, then record on a refusal), decide, commit; again while others move first."""
        policy = self._commits.policy(run.job)
        expire_at = self.expire_at(run.schedule_time)
        current: Versioned | None = None
        for _ in range(_CLAIM_ROUNDS):
            now = self._clock()
            gate = self._commits.look(run, now)
            if gate.holder_key is not None and gate.holder is not None:
                if policy == OVERLAP_DELAY or run.trigger in AUDIT_TRIGGERS:
                    # The run's own record answers first: a time done (or held) already
                    # is a duplicate whoever holds the slot, never one to try again later.
                    if current is None:
                        current = self._store.get(run.key)
                    if current is not None and not may_take_over(current.record, now):
                        return Duplicate(current.record.status, current.record)
                    return Yielded(policy, gate.holder_key, gate.holder, None)
                record = skipped_record(run, attempt_id, now, expire_at, gate.holder_key)
            else:
                record = fresh_record(run, attempt_id, now, self._lease_ends(now), expire_at)
            if current is not None:
                existing = current.record
                if existing.attempt_id == attempt_id:  # our commit landed; its answer was lost
                    if existing.status is Status.IN_PROGRESS:
                        return Claim(run, existing, current.version)
                    return Duplicate(existing.status, existing)
                if not may_take_over(existing, now):
                    return Duplicate(existing.status, existing)
                if not existing.is_expired(now):
                    record = replace(record, attempts=existing.attempts + 1)
            try:
                version = self._commits.claim(
                    run, record, None if current is None else current.version, gate
                )
            except (RecordExists, VersionConflict):
                # The run exists (or moved on, or was deleted), or the slot moved: look again.
                current = self._store.get(run.key)
                continue
            if record.status is Status.SKIPPED:
                return Yielded(policy, record.yielded_to or "", gate.holder or record, record)
            return Claim(run, record, version)
        raise StoreUnavailable(f"run {run.key} kept changing under concurrent claims")

    def renew(self, claim: Claim) -> Claim:
        return self._fenced(claim, {"lease_expires": self._lease_ends(self._clock())})

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
        return Claim(claim.identity, current.record, current.version)

    def complete(self, claim: Claim) -> None:
        self._finish(claim, Status.COMPLETED, error=None)

    def release(self, claim: Claim, error: str) -> None:
        """Give a run back after a retryable failure so the next delivery claims it at once."""
        self._finish(claim, Status.RELEASED, error=error)

    def fail(self, claim: Claim, error: str) -> None:
        self._finish(claim, Status.FAILED, error=error)

    # -- the job's suspension (see runledger.ledger.suspension) ------------------

    def suspension(self, run: RunIdentity) -> Suspension | None:
        """The suspension document of the run's job, or None if it has none."""
        return self.job_suspension(run.project, run.region, run.job)

    def job_suspension(self, project: str, region: str, job: str) -> Suspension | None:
        key = suspension_key(project, region, job)
        return read_suspension(self._suspension_store(), key)

    def change_suspension(
        self, project: str, region: str, job: str, step: Callable[[Suspension], Suspension | None]
    ) -> Suspension:
        """Apply `step` (`ledger.suspension`) to the job's document by compare-and-set."""
        key = suspension_key(project, region, job)
        return change(self._suspension_store(), key, job, step)

    def count_outcome(
        self, run: RunIdentity, failed: bool, threshold: int, error: str | None
    ) -> Suspension:
        """Count a scheduled run's final outcome toward its job's suspension; the state after."""
        step = counted(run.schedule_time, failed, threshold, self._clock(), error)
        return self.change_suspension(run.project, run.region, run.job, step)

    def record_suspended(self, run: RunIdentity, note: str) -> RunRecord | Duplicate:
        """Record the run `suspended` (final, never run), unless a record says otherwise.

        A run done already (or held under a live lease) is a Duplicate, as for a claim;
        a released or expired one is replaced at the version read. Its record alone:
        a suspended run is no job's overlap holder.
        """
        expire_at = self.expire_at(run.schedule_time)
        current: Versioned | None = None
        for _ in range(_CLAIM_ROUNDS):
            now = self._clock()
            record = suspended_record(run, self._new_attempt_id(), now, expire_at, note)
            try:
                if current is None:
                    self._store.create(run.key, record)
                else:
                    if not may_take_over(current.record, now):
                        return Duplicate(current.record.status, current.record)
                    self._store.update(run.key, record.to_document(), current.version)
            except (RecordExists, VersionConflict):
                current = self._store.get(run.key)
                continue
            return record
        raise StoreUnavailable(f"run {run.key} kept changing while it was recorded suspended")

    def _suspension_store(self) -> SuspensionStore:
        if not self._keeps_suspensions:
            raise TypeError(f"{type(self._store).__name__} cannot keep job suspensions")
        return cast(SuspensionStore, self._store)

    # The store is this Ledger's for life, and a runtime Protocol check looks up every
    # method of the Protocol, through each wrapper around the store: checked once.
    @cached_property
    def _keeps_suspensions(self) -> bool:
        return isinstance(self._store, SuspensionStore)

    @cached_property
    def _keeps_work(self) -> bool:
        return isinstance(self._store, WorkStore)

    # -- the run's checkpoints and outputs (see runledger.sdk.work) -------------

    def items(self, run_key: str, item_ids: Sequence[str]) -> dict[str, StoredItem]:
        """The run's work items among `item_ids` that exist, by id, in one round trip."""
        return self._work_store().get_items(run_key, item_ids)

    def write_item(self, claim: Claim, item: WorkItem) -> tuple[Claim, StoredItem]:
        """Create `item` in one commit with a renewal fenced by `claim`; the first value wins.

        Returns the claim after the write and what the store holds under the
        item's id: this item, or the one an earlier attempt wrote first.
        """
        store = self._work_store()
        key = claim.identity.key
        for _ in range(_ITEM_WRITE_ROUNDS):
            lease_expires = self._lease_ends(self._clock())
            try:
                version = store.create_item_fenced(
                    key, claim.version, {"lease_expires": lease_expires}, item
                )
            except (RecordExists, VersionConflict, StoreUnavailable) as exc:
                claim, found = self._settle_item(claim, item, exc)
                if found is not None:
                    return claim, found
                continue  # the run is ours at the version just read; the item is absent
            record = replace(claim.record, lease_expires=lease_expires)
            return Claim(claim.identity, record, version), StoredItem(item, version)
        raise StoreUnavailable(f"writing {item.id} of run {key} kept failing")

    def _settle_item(
        self, claim: Claim, item: WorkItem, error: Exception
    ) -> tuple[Claim, StoredItem | None]:
        """Work out what a refused or unanswered item write left behind, from the store itself.

        If the run is still ours (see `resync`), adopt its version: the item
        found, if any, is ours (landed, answer lost) or an earlier attempt's.
        """
        key = claim.identity.key
        try:
            found = self._work_store().get_items(key, [item.id]).get(item.id)
            adopted = self.resync(claim)
        except StoreUnavailable as exc:
            raise StoreUnavailable(f"writing {item.id} of run {key}: outcome unknown") from exc
        except LeaseLost as exc:
            raise LeaseLost(f"{exc}; {item.id} not written") from error
        return adopted, found

    def _work_store(self) -> WorkStore:
        if not self._keeps_work:
            raise TypeError(f"{type(self._store).__name__} cannot keep checkpoints or outputs")
        return cast(WorkStore, self._store)

    # -- the dead letter pushed for a final failure (`delivery.dead_letter`) --

    def mark_dead_lettered(self, key: str, seen: Versioned, letter_id: str) -> None:
        """Note on the run that its dead letter `letter_id` was published, if still as `seen`.

        VersionConflict if the run changed since it was read (a new attempt claimed
        it): that attempt's fate is its own, and its record carries no such note.
        """
        changes = {"dead_letter_id": letter_id, "dead_lettered_at": self._clock()}
        self._store.update(key, changes, seen.version)

    # -- the operator's release of a dead letter ----------------------------

    def release_failed(
        self, key: str, seen: Versioned, released_by: str, clear_checkpoints: Sequence[str]
    ) -> None:
        """Put a failed run back to `released` if it is still exactly as `seen`.

        Its next delivery claims it at once and redoes it. The named checkpoints
        are deleted in the same commit, so every one of those stages is redone.
        """
        refuse_release(key, seen.record, self._clock())
        changes = {
            "status": Status.RELEASED.value,
            "released_at": self._clock(),
            "released_by": released_by,
        }
        try:
            if clear_checkpoints:
                ids = [item_id(WorkKind.CHECKPOINT, name) for name in clear_checkpoints]
                self._work_store().delete_items_fenced(key, seen.version, changes, ids)
            else:
                self._store.update(key, changes, seen.version)
        except VersionConflict as exc:
            raise ReleaseRefused(
                f"run {key} changed since it was read; nothing released (look again)"
            ) from exc

    def _finish(self, claim: Claim, status: Status, error: str | None) -> None:
        now = self._clock()
        changes = _finish_changes(status, now, error)
        try:
            self._fenced(claim, changes)
        except LeaseLost:
            current = self._store.get(claim.identity.key)
            mine = current is not None and current.record.attempt_id == claim.attempt_id
            if mine and current.record.status is status:
                return  # our write landed and only its answer was lost
            if not (mine and _lease_still_ours(current.record, claim, now)):
                raise
            # One of our own writes whose answer was lost (a renewal, a work item) moved
            # the version, and no read since told us: the run is still ours (seed 1869).
            self._fenced(Claim(claim.identity, current.record, current.version), changes)

    def _fenced(self, claim: Claim, changes: dict[str, Any]) -> Claim:
        """Change the run at the claim's version (its job's slot alike); the claim after it."""
        record = RunRecord.from_document({**claim.record.to_document(), **changes})
        try:
            version = self._commits.fenced(claim.identity, changes, claim.version, record)
        except VersionConflict as exc:
            raise LeaseLost(
                f"attempt {claim.attempt_id} no longer holds run {claim.identity.key}"
            ) from exc
        return Claim(claim.identity, record, version)

    def _lease_ends(self, now: datetime) -> datetime:
        """Where a lease taken or renewed at `now` ends."""
        return now + self.claim_lease
