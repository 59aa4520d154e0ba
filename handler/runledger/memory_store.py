"""RunStore in process memory, for fast model-based tests.

It passes the same store contract tests as Firestore; it is never used in
production and never stands in for Firestore in integration tests.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping
from typing import Any

from runledger.exceptions import RecordExists, VersionConflict
from runledger.record import RunRecord, Versioned


class MemoryRunStore:
    def __init__(self) -> None:
        self._records: dict[str, Versioned] = {}
        self._versions = itertools.count(1)
        self._lock = threading.Lock()

    def get(self, key: str) -> Versioned | None:
        with self._lock:
            return self._records.get(key)

    def create(self, key: str, record: RunRecord) -> Any:
        with self._lock:
            if key in self._records:
                raise RecordExists(key)
            return self._put(key, record)

    def update(self, key: str, changes: Mapping[str, Any], version: Any) -> Any:
        with self._lock:
            current = self._checked(key, version)
            document = current.record.to_document() | dict(changes)
            return self._put(key, RunRecord.from_document(document))

    def delete(self, key: str, version: Any) -> None:
        with self._lock:
            self._checked(key, version)
            del self._records[key]

    def _checked(self, key: str, version: Any) -> Versioned:
        current = self._records.get(key)
        if current is None or current.version != version:
            raise VersionConflict(key)
        return current

    def _put(self, key: str, record: RunRecord) -> int:
        version = next(self._versions)
        self._records[key] = Versioned(record, version)
        return version
