"""RunStore in process memory, for fast model-based tests.

It passes the same store contract tests as Firestore; it is never used in
production and never stands in for Firestore in integration tests.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from runledger.exceptions import RecordExists, VersionConflict
from runledger.ledger.epochs import AuditEpoch, StoredEpoch
from runledger.ledger.record import RunRecord, Versioned
from runledger.ledger.watermarks import StoredShard
from runledger.ledger.workitem import StoredItem, WorkItem, plain_value


class MemoryRunStore:
    def __init__(self) -> None:
        self._records: dict[str, Versioned] = {}
        # A run's checkpoints and outputs, by (run key, item id).
        self._items: dict[tuple[str, str], StoredItem] = {}
        # The audit's epochs, by key: apart from the runs, as on Firestore.
        self._epochs: dict[str, StoredEpoch] = {}
        # The audit's watermark shards, by key: kept like the epochs.
        self._shards: dict[str, StoredShard] = {}
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
