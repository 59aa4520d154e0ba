"""The simulator's store on the official Firestore emulator: the real `FirestoreRunStore`.

Each seed gets an emptied database. The backfill documents are the real
`FirestoreBackfills`, and deleting the audit's documents deletes what an
operator's delete of runledger_audit's epochs, watermarks and overlap slots would.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from runledger.backfill.firestore_store import FirestoreBackfills
from runledger.facts import WORK_COLLECTION
from runledger.ledger.firestore_store import (
    AUDIT_COLLECTION,
    EPOCH_COLLECTION,
    WATERMARK_COLLECTION,
    FirestoreRunStore,
)
from runledger.ledger.overlap import OVERLAP_COLLECTION
from scheduler_dedup.localrun.emulator import FirestoreEmulator

COLLECTION = "scheduler_runs"


class EmulatedStore(FirestoreRunStore):
    """`FirestoreRunStore`, with what the simulation does besides the handler's calls."""

    def __init__(self, client: Any) -> None:
        super().__init__(client, COLLECTION)
        self._client = client

    def backfills(self) -> FirestoreBackfills:
        return FirestoreBackfills(self._client, COLLECTION)

    def delete_expired(self, before: Any) -> list[str]:
        """Firestore's TTL deletion, all at once: every run whose `expire_at` is before
        `before`, with its checkpoints and outputs; the keys deleted."""
        from google.cloud.firestore import FieldFilter

        runs = self._client.collection(COLLECTION)
        gone = []
        for snapshot in runs.where(filter=FieldFilter("expire_at", "<", before)).stream():
            for item in snapshot.reference.collection(WORK_COLLECTION).stream():
                item.reference.delete()
            snapshot.reference.delete()
            gone.append(snapshot.id)
        return gone

    def delete_audit_documents(self) -> None:
        audit = self._client.collection(AUDIT_COLLECTION).document(COLLECTION)
        for name in (EPOCH_COLLECTION, WATERMARK_COLLECTION, OVERLAP_COLLECTION):
            for snapshot in audit.collection(name).stream():
                snapshot.reference.delete()


def emulated_stores(emulator: FirestoreEmulator) -> Callable[[], EmulatedStore]:
    """A factory of stores, each on the emulator's database emptied first."""
    from google.cloud import firestore

    os.environ["FIRESTORE_EMULATOR_HOST"] = emulator.host

    def store() -> EmulatedStore:
        emulator.clear()
        return EmulatedStore(firestore.Client(project=emulator.project))

    return store
