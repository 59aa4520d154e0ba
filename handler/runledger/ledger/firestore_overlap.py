"""The commits of `runledger.ledger.overlap` on Firestore: a run and its job's slot, in one batch.

A batched write is atomic and its preconditions are checked together ("Transactions
and batched writes": all of a batch's writes succeed or none do), so a run's claim
and the slot naming it land as one, guarded like every other ledger write by an
exists=false or last-update-time precondition: no transaction, no lock, and no
permission beyond the `datastore.entities.create` / `update` the handler has.
`FirestoreRunStore` commits these batches and maps their errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runledger.ledger.overlap import Slot, StoredSlot
from runledger.ledger.record import RunRecord

if TYPE_CHECKING:
    from google.cloud import firestore


def stored_slot(snapshot: Any) -> StoredSlot | None:
    if not snapshot.exists:
        return None
    return StoredSlot(Slot.from_document(snapshot.to_dict()), snapshot.update_time)


def claim_batch(
    client: firestore.Client,
    runs: firestore.CollectionReference,
    slots: firestore.CollectionReference,
    request: tuple[str, RunRecord, Any | None, str, Any | None, str | None],
) -> firestore.WriteBatch:
    """The batch of `OverlapStore.claim_slotted(*request)`."""
    run_key, record, run_version, key, slot_version, ended = request
    batch = client.batch()
    document = record.to_document()
    if run_version is None:
        batch.create(runs.document(run_key), document)
    else:
        option = client.write_option(last_update_time=run_version)
        batch.update(runs.document(run_key), document, option=option)
    slot = Slot(run_key, record).to_document()
    if slot_version is None:
        batch.create(slots.document(key), slot)
    else:
        batch.update(
            slots.document(key), slot, option=client.write_option(last_update_time=slot_version)
        )
    if ended is not None:
        # update() without an option requires the document to exist: a record gone
        # since fails the commit rather than being recreated.
        batch.update(runs.document(ended), {"lease_expires": record.claimed_at})
    return batch


def slotted_batch(
    client: firestore.Client,
    runs: firestore.CollectionReference,
    slots: firestore.CollectionReference,
    request: tuple[str, Mapping[str, Any], Any, str, Slot],
) -> firestore.WriteBatch:
    """The batch of `OverlapStore.update_slotted(*request)`.

    The slot is set, not updated: set() needs no existing document, so a slot
    deleted since (with the rest of the audit's documents) comes back whole in
    the holder's own commit instead of failing it.
    """
    run_key, changes, version, key, slot = request
    batch = client.batch()
    option = client.write_option(last_update_time=version)
    batch.update(runs.document(run_key), dict(changes), option=option)
    batch.set(slots.document(key), slot.to_document())
    return batch
