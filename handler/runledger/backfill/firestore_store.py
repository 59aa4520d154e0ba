"""Where backfill requests live on Firestore: beside the audit's epochs, never among the runs.

Each request is one document under AUDIT_COLLECTION/<ledger collection>/backfills/,
keyed by what it asks (`runledger.backfill.queue.request_key`), and one queue document
there lists the requests still pending, so the handler's audit finds them by key:
no query, no index, and only the get, create and update permissions the handler
already has. Creates carry exists=false and updates a last-update-time
precondition, so every write is fenced like the ledger's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runledger.ledger.firestore_store import (
    AUDIT_COLLECTION,
    CALL_DEADLINE_S,
    _retry,
    _unavailable_on_transport_errors,
    create_document,
    update_document,
)

if TYPE_CHECKING:
    from google.cloud import firestore

BACKFILL_COLLECTION = "backfills"


class FirestoreBackfills:
    """`backfill.queue.BackfillDocs` on Firestore."""

    def __init__(self, client: firestore.Client, collection: str) -> None:
        self._client = client
        audit = client.collection(AUDIT_COLLECTION).document(collection)
        self._docs = audit.collection(BACKFILL_COLLECTION)

    def get(self, key: str) -> tuple[dict[str, Any], Any] | None:
        with _unavailable_on_transport_errors():
            snapshot = self._docs.document(key).get(retry=_retry(), timeout=CALL_DEADLINE_S)
        if not snapshot.exists:
            return None
        return snapshot.to_dict(), snapshot.update_time

    def create(self, key: str, data: Mapping[str, Any]) -> Any:
        return create_document(self._docs.document(key), dict(data))

    def update(self, key: str, changes: Mapping[str, Any], version: Any) -> Any:
        return update_document(self._client, self._docs.document(key), dict(changes), version)
