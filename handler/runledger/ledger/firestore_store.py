"""RunStore on Firestore: one document per run, fenced by `update_time` preconditions.

`create()` is a single commit with an exists=false precondition and `update()`
carries a last-update-time precondition (so do the run writes batched with a
work item), so the common path costs one RPC per step and never takes a
transaction lock.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry

from runledger.exceptions import (
    RecordExists,
    StorePermissionDenied,
    StoreUnavailable,
    StoreUnusable,
    VersionConflict,
)
from runledger.facts import WORK_COLLECTION
from runledger.ledger.epochs import AuditEpoch, StoredEpoch
from runledger.ledger.record import RunRecord, Versioned
from runledger.ledger.suspension import SUSPENSION_COLLECTION, StoredSuspension, Suspension
from runledger.ledger.watermarks import StoredShard
from runledger.ledger.workitem import StoredItem, WorkItem

if TYPE_CHECKING:
    from google.cloud import firestore

    from runledger.ledger.overlap import Slot, StoredSlot

# One store call may take this long in all, retries included: well inside
# Cloud Scheduler's minimum attempt deadline of 15 s, so an unreachable
# Firestore becomes a 503 the Scheduler retries, not a timed-out delivery.
CALL_DEADLINE_S = 8.0
# The audit's epochs live at AUDIT_COLLECTION/<ledger collection>/EPOCH_COLLECTION/<key>:
# outside the run collection (listings and queries of runs never see them), one
# set per ledger collection, and in no collection group a TTL policy covers.
AUDIT_COLLECTION = "runledger_audit"
EPOCH_COLLECTION = "epochs"
# Each epoch's lasting copy, written in the epoch's own commits, at
# LASTING_EPOCH_COLLECTION/<ledger collection>/EPOCH_COLLECTION/<key>: outside
# AUDIT_COLLECTION, so deleting the audit's working documents keeps it (ledger/epochs.py).
LASTING_EPOCH_COLLECTION = "runledger_epochs"
# The audit's watermark shards (`runledger.ledger.watermarks`), beside the epochs.
WATERMARK_COLLECTION = "watermarks"
_TRANSIENT = (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError)


def _retry() -> gretry.Retry:
    return gretry.Retry(
        predicate=gretry.if_exception_type(*_TRANSIENT),
        initial=0.1,
        maximum=1.0,
        timeout=CALL_DEADLINE_S,
    )


def _store_error(exc: gexc.GoogleAPICallError) -> StoreUnavailable:
    """Name the two causes an operator must act on; every other error reads as an outage."""
    if isinstance(exc, gexc.Forbidden):  # PermissionDenied (gRPC 7) is a Forbidden (HTTP 403)
        return StorePermissionDenied(
            f"Firestore denied the handler's account ({type(exc).__name__}: {exc.message}); "
            "IAM grants can take minutes to apply after a deploy"
        )
    # A Datastore-mode database answers every Firestore API call with
    # FAILED_PRECONDITION "The Cloud Firestore API is not available for Firestore
    # in Datastore Mode database projects/P/databases/D" (older projects: "... for
    # Cloud Datastore projects"), as reported in quarkiverse/quarkus-google-cloud-services#422
    # and GoogleCloudPlatform/java-docs-samples#3436.
    text = str(exc.message).lower()
    if isinstance(exc, gexc.FailedPrecondition) and "firestore api is not available" in text:
        return StoreUnusable(
            "the Firestore database is in Datastore mode; the ledger needs a database "
            f"in Firestore Native mode ({exc.message})"
        )
    return StoreUnavailable(f"Firestore error: {type(exc).__name__}: {exc.message}")


@contextmanager
def _unavailable_on_transport_errors() -> Iterator[None]:
    try:
        yield
    except (RecordExists, VersionConflict):
        raise
    except (gexc.RetryError, *_TRANSIENT) as exc:
        raise StoreUnavailable(f"Firestore unavailable: {type(exc).__name__}") from exc
    except gexc.GoogleAPICallError as exc:
        raise _store_error(exc) from exc


def create_document(doc: firestore.DocumentReference, data: dict[str, Any]) -> Any:
    """Creates `doc` only if it does not exist (exists=false): `RecordExists` otherwise.

    The one precondition every first write of the ledger relies on: a claim, an
    epoch, a watermark shard, a backfill request.
    """
    with _unavailable_on_transport_errors():
        try:
            result = doc.create(data, retry=_retry(), timeout=CALL_DEADLINE_S)
        except gexc.AlreadyExists as exc:
            raise RecordExists(doc.id) from exc
    return result.update_time


def update_document(
    client: firestore.Client, doc: firestore.DocumentReference, data: dict[str, Any], version: Any
) -> Any:
    """Updates `doc` only at the update time read (`version`): `VersionConflict` otherwise.

    update(), unlike set(), also fails on a document deleted since: a compare-and-set.
    """
    option = client.write_option(last_update_time=version)
    with _unavailable_on_transport_errors():
        try:
            result = doc.update(data, option=option, retry=_retry(), timeout=CALL_DEADLINE_S)
        except (gexc.FailedPrecondition, gexc.NotFound) as exc:
            raise VersionConflict(doc.id) from exc
    return result.update_time


class FirestoreRunStore:
    def __init__(self, client: firestore.Client, collection: str) -> None:
        self._client = client
        self._collection = client.collection(collection)
        audit = client.collection(AUDIT_COLLECTION).document(collection)
        self._epochs = audit.collection(EPOCH_COLLECTION)
        lasting = client.collection(LASTING_EPOCH_COLLECTION).document(collection)
        self._lasting = lasting.collection(EPOCH_COLLECTION)
        self._shards = audit.collection(WATERMARK_COLLECTION)
        self._audit = audit  # and each job's overlap slot, under OVERLAP_COLLECTION
        # Each job's suspension (runledger.ledger.suspension): outside runledger_audit.
        suspensions = client.collection(SUSPENSION_COLLECTION).document(collection)
        self._suspensions = suspensions.collection("jobs")

    def get(self, key: str) -> Versioned | None:
        with _unavailable_on_transport_errors():
            snapshot = self._collection.document(key).get(retry=_retry(), timeout=CALL_DEADLINE_S)
        if not snapshot.exists:
            return None
        return Versioned(RunRecord.from_document(snapshot.to_dict()), snapshot.update_time)

    def _existing(self, refs: Sequence[Any]) -> list[Any]:
        """The snapshots of `refs` that exist, in one BatchGetDocuments call."""
        with _unavailable_on_transport_errors():
            snapshots = self._client.get_all(refs, retry=_retry(), timeout=CALL_DEADLINE_S)
            return [snapshot for snapshot in snapshots if snapshot.exists]

    def get_many(self, keys: Sequence[str]) -> dict[str, RunRecord]:
        """The records among `keys` that exist, in one BatchGetDocuments call (the audit's read)."""
        refs = [self._collection.document(key) for key in keys]
        return {
            snapshot.id: RunRecord.from_document(snapshot.to_dict())
            for snapshot in self._existing(refs)
        }

    def create(self, key: str, record: RunRecord) -> Any:
        return create_document(self._collection.document(key), record.to_document())

    def update(self, key: str, changes: Mapping[str, Any], version: Any) -> Any:
        return update_document(self._client, self._collection.document(key), dict(changes), version)

    def get_items(self, key: str, item_ids: Sequence[str]) -> dict[str, StoredItem]:
        if not item_ids:
            return {}
        work = self._collection.document(key).collection(WORK_COLLECTION)
        refs = [work.document(item_id) for item_id in item_ids]
        return {
            snapshot.id: StoredItem(
                WorkItem.from_document(snapshot.to_dict()), snapshot.update_time
            )
            for snapshot in self._existing(refs)
        }

    def create_item_fenced(
        self, key: str, version: Any, run_changes: Mapping[str, Any], item: WorkItem
    ) -> Any:
        run_ref = self._collection.document(key)
        batch = self._client.batch()
        batch.update(
            run_ref, dict(run_changes), option=self._client.write_option(last_update_time=version)
        )
        batch.create(run_ref.collection(WORK_COLLECTION).document(item.id), item.to_document())
        with _unavailable_on_transport_errors():
            try:
                results = batch.commit(retry=_retry(), timeout=CALL_DEADLINE_S)
            except gexc.AlreadyExists as exc:
                raise RecordExists(f"{key}/{item.id}") from exc
            except (gexc.FailedPrecondition, gexc.NotFound) as exc:
                raise VersionConflict(key) from exc
        return results[0].update_time

    def delete_items_fenced(
        self, key: str, version: Any, run_changes: Mapping[str, Any], item_ids: Sequence[str]
    ) -> Any:
        run_ref = self._collection.document(key)
        batch = self._client.batch()
        batch.update(
            run_ref, dict(run_changes), option=self._client.write_option(last_update_time=version)
        )
        work = run_ref.collection(WORK_COLLECTION)
        for item_id in item_ids:
            batch.delete(work.document(item_id))
        with _unavailable_on_transport_errors():
            try:
                results = batch.commit(retry=_retry(), timeout=CALL_DEADLINE_S)
            except (gexc.FailedPrecondition, gexc.NotFound) as exc:
                raise VersionConflict(key) from exc
        return results[0].update_time

    def get_epochs(self, keys: Sequence[str]) -> dict[str, StoredEpoch]:
        refs = [self._epochs.document(key) for key in keys]
        return {
            snapshot.id: StoredEpoch(
                AuditEpoch.from_document(snapshot.to_dict()), snapshot.update_time
            )
            for snapshot in self._existing(refs)
        }

    def get_lasting_epochs(self, keys: Sequence[str]) -> dict[str, AuditEpoch]:
        refs = [self._lasting.document(key) for key in keys]
        return {
            snapshot.id: AuditEpoch.from_document(snapshot.to_dict())
            for snapshot in self._existing(refs)
        }

    def create_epoch(self, key: str, epoch: AuditEpoch) -> Any:
        batch = self._client.batch()
        batch.create(self._epochs.document(key), epoch.to_document())
        return self._commit_epoch(batch, key, epoch)

    def replace_epoch(self, key: str, epoch: AuditEpoch, version: Any) -> Any:
        # update() with every field, guarded by the last update time read: a
        # compare-and-set that, unlike set(), fails on a document deleted since.
        batch = self._client.batch()
        option = self._client.write_option(last_update_time=version)
        batch.update(self._epochs.document(key), epoch.to_document(), option=option)
        return self._commit_epoch(batch, key, epoch)

    def _commit_epoch(self, batch: Any, key: str, epoch: AuditEpoch) -> Any:
        """Commit the epoch's write with its lasting copy set whole: both or neither."""
        batch.set(self._lasting.document(key), epoch.to_document())
        with _unavailable_on_transport_errors():
            try:
                results = batch.commit(retry=_retry(), timeout=CALL_DEADLINE_S)
            except gexc.AlreadyExists as exc:
                raise RecordExists(key) from exc
            except (gexc.FailedPrecondition, gexc.NotFound) as exc:
                raise VersionConflict(key) from exc
        return results[0].update_time

    def get_shards(self, keys: Sequence[str]) -> dict[str, StoredShard]:
        refs = [self._shards.document(key) for key in keys]
        return {
            snapshot.id: StoredShard.from_document(snapshot.to_dict(), snapshot.update_time)
            for snapshot in self._existing(refs)
        }

    def create_shard(self, key: str, shard: StoredShard) -> Any:
        return create_document(self._shards.document(key), shard.to_document())

    def replace_shard(self, key: str, shard: StoredShard, version: Any) -> Any:
        # As replace_epoch: every field, at the update time read; the one map
        # field `jobs` is replaced whole, so a job's mark is never half-merged.
        return update_document(
            self._client, self._shards.document(key), shard.to_document(), version
        )

    # -- each job's suspension (runledger.ledger.suspension) --

    def get_suspension(self, key: str) -> StoredSuspension | None:
        with _unavailable_on_transport_errors():
            snapshot = self._suspensions.document(key).get(retry=_retry(), timeout=CALL_DEADLINE_S)
        if not snapshot.exists:
            return None
        return StoredSuspension(Suspension.from_document(snapshot.to_dict()), snapshot.update_time)

    def create_suspension(self, key: str, suspension: Suspension) -> Any:
        return create_document(self._suspensions.document(key), suspension.to_document())

    def replace_suspension(self, key: str, suspension: Suspension, version: Any) -> Any:
        # Every field, at the update time read: a compare-and-set (see replace_epoch).
        return update_document(
            self._client, self._suspensions.document(key), suspension.to_document(), version
        )

    # -- each job's overlap slot (runledger.ledger.overlap, runledger.ledger.firestore_overlap) --
    # Only a job with an overlap policy has one: their modules load on its first use.

    def _slots(self) -> Any:
        from runledger.ledger.overlap import OVERLAP_COLLECTION

        return self._audit.collection(OVERLAP_COLLECTION)

    def get_slot(self, key: str) -> StoredSlot | None:
        from runledger.ledger.firestore_overlap import stored_slot

        with _unavailable_on_transport_errors():
            snapshot = self._slots().document(key).get(retry=_retry(), timeout=CALL_DEADLINE_S)
        return stored_slot(snapshot)

    def claim_slotted(
        self,
        run_key: str,
        record: RunRecord,
        run_version: Any | None,
        key: str,
        slot_version: Any | None,
        ended: str | None,
    ) -> Any:
        from runledger.ledger.firestore_overlap import claim_batch

        request = (run_key, record, run_version, key, slot_version, ended)
        return self._commit_slotted(
            claim_batch(self._client, self._collection, self._slots(), request), run_key
        )

    def update_slotted(
        self, run_key: str, changes: Mapping[str, Any], version: Any, key: str, slot: Slot
    ) -> Any:
        from runledger.ledger.firestore_overlap import slotted_batch

        request = (run_key, changes, version, key, slot)
        return self._commit_slotted(
            slotted_batch(self._client, self._collection, self._slots(), request), run_key
        )

    def _commit_slotted(self, batch: Any, key: str) -> Any:
        with _unavailable_on_transport_errors():
            try:
                results = batch.commit(retry=_retry(), timeout=CALL_DEADLINE_S)
            except (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.NotFound) as exc:
                raise VersionConflict(key) from exc
        return results[0].update_time
