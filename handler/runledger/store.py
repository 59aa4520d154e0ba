"""The persistence contract: four primitive operations the ledger is built on.

Every write that follows a claim is fenced by the version the claimant last
saw, so a store only needs atomic create and compare-and-set; no transactions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from runledger.record import RunRecord, Versioned


class RunStore(Protocol):
    def get(self, key: str) -> Versioned | None:
        """The record and its version, or None if there is none."""

    def create(self, key: str, record: RunRecord) -> Any:
        """Write a new record and return its version; raise RecordExists if the key is taken."""

    def update(self, key: str, changes: Mapping[str, Any], version: Any) -> Any:
        """Change fields if the record is still at `version`; raise VersionConflict if not."""

    def delete(self, key: str, version: Any) -> None:
        """Remove the record if it is still at `version`; raise VersionConflict if not."""
