"""Every store the handler uses, in process memory, for model tests and the simulator.

It implements each protocol the App reaches (`RunStore`, `WorkStore`, the audit's
`AuditStore`, `OverlapStore`, `SuspensionStore`, and the backfill documents through `backfills()`)
with Firestore's semantics: create fails on a taken key, every fenced write
fails on a moved or deleted document, a slotted commit lands whole or not at all,
and an update without a precondition still needs its document to exist. It
passes the same contract tests as Firestore; it is never used in production and
never stands in for Firestore in integration tests (`scheduler_dedup.localrun.simulation` runs the
whole system on it).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from runledger.exceptions import RecordExists, VersionConflict
from runledger.ledger.epochs import AuditEpoch, StoredEpoch
from runledger.ledger.overlap import Slot, StoredSlot
from runledger.ledger.record import RunRecord, Versioned
from runledger.ledger.suspension import StoredSuspension, Suspension
from runledger.ledger.watermarks import StoredShard
from runledger.ledger.workitem import StoredItem, WorkItem, plain_value


class MemoryRunStore:
    def __init__(self) -> None:
        self._records: dict[str, Versioned] = {}
        # A run's checkpoints and outputs, by (run key, item id).
        self._items: dict[tuple[str, str], StoredItem] = {}
        # The audit's epochs, by key: apart from the runs, as on Firestore.
        self._epochs: dict[str, StoredEpoch] = {}
        # Their lasting copies: written with them, kept when the audit's documents go.
        self._lasting: dict[str, AuditEpoch] = {}
        # The audit's watermark shards, by key: kept like the epochs.
        self._shards: dict[str, StoredShard] = {}
        # Each job's overlap slot, by key: beside the epochs, as on Firestore.
        self._slots: dict[str, StoredSlot] = {}
        # Each job's suspension, by key: outside the audit's documents, as on Firestore.
        self._suspensions: dict[str, StoredSuspension] = {}
        # The backfill requests and their queue (`backfills()`), beside them too.
        self._documents: dict[str, tuple[dict[str, Any], int]] = {}
        self._versions = itertools.count(1)
        self._lock = threading.Lock()

    def get(self, key: str) -> Versioned | None:
        with self._lock:
            return self._records.get(key)

    def get_many(self, keys: Sequence[str]) -> dict[str, RunRecord]:
        with self._lock:
            found = {key: self._records.get(key) for key in keys}
        return {key: versioned.record for key, versioned in found.items() if versioned}

    def create(self, key: str, record: RunRecord) -> Any:
        with self._lock:
            if key in self._records:
                raise RecordExists(key)
            return self._put(key, record)

    def update(self, key: str, changes: Mapping[str, Any], version: Any) -> Any:
        with self._lock:
            return self._apply(key, self._checked(key, version), changes)

    def get_items(self, key: str, item_ids: Sequence[str]) -> dict[str, StoredItem]:
        with self._lock:
            found = {item_id: self._items.get((key, item_id)) for item_id in item_ids}
        return {
            item_id: StoredItem(
                dataclasses.replace(stored.item, value=plain_value(stored.item.value)),
                stored.version,
            )
            for item_id, stored in found.items()
            if stored is not None
        }

    def create_item_fenced(
        self, key: str, version: Any, run_changes: Mapping[str, Any], item: WorkItem
    ) -> Any:
        # Copy the value as Firestore would serialise it, so callers cannot
        # change a stored item by mutating what they passed in.
        stored = dataclasses.replace(item, value=plain_value(item.value))
        with self._lock:
            current = self._checked(key, version)
            if (key, item.id) in self._items:
                raise RecordExists(f"{key}/{item.id}")
            new_version = self._apply(key, current, run_changes)
            self._items[(key, item.id)] = StoredItem(stored, new_version)
            return new_version

    def delete_items_fenced(
        self, key: str, version: Any, run_changes: Mapping[str, Any], item_ids: Sequence[str]
    ) -> Any:
        with self._lock:
            new_version = self._apply(key, self._checked(key, version), run_changes)
            for item_id in item_ids:
                self._items.pop((key, item_id), None)
            return new_version

    def get_epochs(self, keys: Sequence[str]) -> dict[str, StoredEpoch]:
        with self._lock:
            return {key: self._epochs[key] for key in keys if key in self._epochs}

    def get_lasting_epochs(self, keys: Sequence[str]) -> dict[str, AuditEpoch]:
        with self._lock:
            return {key: self._lasting[key] for key in keys if key in self._lasting}

    def create_epoch(self, key: str, epoch: AuditEpoch) -> Any:
        with self._lock:
            if key in self._epochs:
                raise RecordExists(key)
            return self._put_epoch(key, epoch)

    def replace_epoch(self, key: str, epoch: AuditEpoch, version: Any) -> Any:
        with self._lock:
            current = self._epochs.get(key)
            if current is None or current.version != version:
                raise VersionConflict(key)
            return self._put_epoch(key, epoch)

    def _put_epoch(self, key: str, epoch: AuditEpoch) -> int:
        version = next(self._versions)
        self._epochs[key] = StoredEpoch(epoch, version)
        self._lasting[key] = epoch
        return version

    def get_shards(self, keys: Sequence[str]) -> dict[str, StoredShard]:
        with self._lock:
            return {key: self._shards[key] for key in keys if key in self._shards}

    def create_shard(self, key: str, shard: StoredShard) -> Any:
        with self._lock:
            if key in self._shards:
                raise RecordExists(key)
            return self._put_shard(key, shard)

    def replace_shard(self, key: str, shard: StoredShard, version: Any) -> Any:
        with self._lock:
            current = self._shards.get(key)
            if current is None or current.version != version:
                raise VersionConflict(key)
            return self._put_shard(key, shard)

    def _put_shard(self, key: str, shard: StoredShard) -> int:
        version = next(self._versions)
        self._shards[key] = StoredShard(dict(shard.marks), version)
        return version

    def _checked(self, key: str, version: Any) -> Versioned:
        current = self._records.get(key)
        if current is None or current.version != version:
            raise VersionConflict(key)
        return current

    def _apply(self, key: str, current: Versioned, changes: Mapping[str, Any]) -> int:
        """Merge `changes` into the current record, as a Firestore update does."""
        document = current.record.to_document() | dict(changes)
        return self._put(key, RunRecord.from_document(document))

    def _put(self, key: str, record: RunRecord) -> int:
        version = next(self._versions)
        self._records[key] = Versioned(record, version)
        return version

    # -- each job's suspension (runledger.ledger.suspension) --

    def get_suspension(self, key: str) -> StoredSuspension | None:
        with self._lock:
            return self._suspensions.get(key)

    def create_suspension(self, key: str, suspension: Suspension) -> Any:
        with self._lock:
            if key in self._suspensions:
                raise RecordExists(key)
            return self._put_suspension(key, suspension)

    def replace_suspension(self, key: str, suspension: Suspension, version: Any) -> Any:
        with self._lock:
            current = self._suspensions.get(key)
            if current is None or current.version != version:
                raise VersionConflict(key)
            return self._put_suspension(key, suspension)

    def _put_suspension(self, key: str, suspension: Suspension) -> int:
        version = next(self._versions)
        self._suspensions[key] = StoredSuspension(suspension, version)
        return version

    # -- each job's overlap slot (runledger.ledger.overlap) --

    def get_slot(self, key: str) -> StoredSlot | None:
        with self._lock:
            return self._slots.get(key)

    def claim_slotted(
        self,
        run_key: str,
        record: RunRecord,
        run_version: Any | None,
        key: str,
        slot_version: Any | None,
        ended: str | None,
    ) -> Any:
        """One commit, every precondition checked before anything is written (a Firestore batch)."""
        with self._lock:
            if run_version is None:
                if run_key in self._records:
                    raise VersionConflict(run_key)
            else:
                self._checked(run_key, run_version)
            stored = self._slots.get(key)
            if (stored is None) != (slot_version is None) or (
                stored is not None and stored.version != slot_version
            ):
                raise VersionConflict(key)
            if ended is not None and ended not in self._records:
                raise VersionConflict(ended)  # update() without an option needs the document
            if ended is not None:
                self._apply(ended, self._records[ended], {"lease_expires": record.claimed_at})
            version = self._put(run_key, record)
            self._slots[key] = StoredSlot(Slot(run_key, record), version)
            return version

    def update_slotted(
        self, run_key: str, changes: Mapping[str, Any], version: Any, key: str, slot: Slot
    ) -> Any:
        """The run fenced at `version`; the slot set whole, no precondition (set() creates it)."""
        with self._lock:
            current = self._checked(run_key, version)
            new_version = self._apply(run_key, current, changes)
            self._slots[key] = StoredSlot(slot, new_version)
            return new_version

    # -- the backfill requests and their queue (runledger.backfill.queue.BackfillDocs) --

    def backfills(self) -> MemoryBackfills:
        """The backfill documents of this store, as `backfill.queue.BackfillDocs`."""
        return MemoryBackfills(self)

    def delete_expired(self, before: datetime) -> list[str]:
        """What Firestore's TTL policy does, all at once: delete every run whose `expire_at`
        is before `before`, with its checkpoints and outputs; the keys deleted."""
        with self._lock:
            gone = [key for key, found in self._records.items() if found.record.expire_at < before]
            for key in gone:
                del self._records[key]
            for item_key in [item for item in self._items if item[0] in gone]:
                del self._items[item_key]
        return gone

    def delete_audit_documents(self) -> None:
        """Delete what lives under runledger_audit but the backfills: epochs, watermarks, slots.

        What an operator's `firestore delete` of those collections leaves (docs/audit.md):
        the epochs' lasting copies stay.
        """
        with self._lock:
            self._epochs.clear()
            self._shards.clear()
            self._slots.clear()


class MemoryBackfills:
    """`backfill.queue.BackfillDocs` in a `MemoryRunStore`: plain documents, fenced alike."""

    def __init__(self, store: MemoryRunStore) -> None:
        self._store = store

    def get(self, key: str) -> tuple[dict[str, Any], Any] | None:
        with self._store._lock:
            found = self._store._documents.get(key)
            return None if found is None else (copy.deepcopy(found[0]), found[1])

    def create(self, key: str, data: Mapping[str, Any]) -> Any:
        with self._store._lock:
            if key in self._store._documents:
                raise RecordExists(key)
            return self._put(key, copy.deepcopy(dict(data)))

    def update(self, key: str, changes: Mapping[str, Any], version: Any) -> Any:
        with self._store._lock:
            found = self._store._documents.get(key)
            if found is None or found[1] != version:
                raise VersionConflict(key)
            return self._put(key, found[0] | copy.deepcopy(dict(changes)))

    def _put(self, key: str, data: dict[str, Any]) -> int:
        version = next(self._store._versions)
        self._store._documents[key] = (data, version)
        return version
