"""The persistence contract the ledger is built on, and only what it uses.

A run store reads, creates and compare-and-sets one record per run; a work
store adds a run's items: a batched read, and a fenced create or delete that
commits with a change to the run. The audit's store (its epoch per job and its
watermarks, with the same three primitives on documents of their own) is
declared beside its readers: `epochs.EpochStore`, `watermarks.AuditStore`.
Every write that follows a claim is fenced by the version the claimant last
saw, so a store only needs atomic create and compare-and-set; no transactions.
`machine.Ledger` is their one caller for writes (it hands the audit's stores to
`epochs` and `watermarks`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from runledger.ledger.record import RunRecord, Versioned
from runledger.ledger.workitem import StoredItem, WorkItem


class RunStore(Protocol):
    def get(self, key: str) -> Versioned | None:
        """The record and its version, or None if there is none."""

    def get_many(self, keys: Sequence[str]) -> dict[str, RunRecord]:
        """The records among `keys` that exist, by key, in one round trip (the audit's read)."""

    def create(self, key: str, record: RunRecord) -> Any:
        """Write a new record and return its version; raise RecordExists if the key is taken."""

    def update(self, key: str, changes: Mapping[str, Any], version: Any) -> Any:
        """Change fields if the record is still at `version`; raise VersionConflict if not."""


@runtime_checkable
class WorkStore(RunStore, Protocol):
    """A RunStore that also keeps a run's checkpoints and outputs next to its record.

    Only jobs that use checkpoints or outputs, and an operator's release that
    clears checkpoints, touch these operations, so a store without them still
    serves every other job.
    """

    def get_items(self, key: str, item_ids: Sequence[str]) -> dict[str, StoredItem]:
        """The run's items among `item_ids` that exist, by id, in one round trip."""

    def create_item_fenced(
        self, key: str, version: Any, run_changes: Mapping[str, Any], item: WorkItem
    ) -> Any:
        """Atomically change the run at `version` (`run_changes` is not empty) and create `item`.

        Returns the run's new version, which is also the item's. Raises
        VersionConflict if the run moved on (nothing is written) or RecordExists
        if the item exists (nothing is written); with both wrong, either may come.
        """

    def delete_items_fenced(
        self, key: str, version: Any, run_changes: Mapping[str, Any], item_ids: Sequence[str]
    ) -> Any:
        """Atomically change the run at `version` and delete its items `item_ids`, if present.

        Returns the run's new version. Raises VersionConflict if the run moved
        on; then nothing is written.
        """
