"""The run store primitives (get, batch get, create, fenced update) act alike everywhere,
and so do the audit store's (the audit's epochs, their lasting copies, and watermark shards).

Each test runs on the Firestore emulator and on the in-memory store.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from runledger.exceptions import RecordExists, VersionConflict
from runledger.ledger.epochs import AuditEpoch
from runledger.ledger.firestore_store import AUDIT_COLLECTION
from runledger.ledger.memory_store import MemoryRunStore
from runledger.ledger.overlap import OverlapStore, Slot
from runledger.ledger.record import Status
from runledger.ledger.watermarks import JobMark, OpenRun, Sighting, StoredShard
from tests.handler.support import T0
from tests.handler.support import run_record as record


def test_create_then_get_round_trips_every_field(store):
    store.create("k1", record())
    got = store.get("k1")
    assert got is not None
    assert got.record == record()


def test_get_of_missing_key_is_none(store):
    assert store.get("absent") is None


def test_get_many_returns_the_existing_records_by_key_and_skips_the_missing(store):
    store.create("k1", record("first"))
    store.create("k2", record("second"))
    got = store.get_many(["k1", "absent", "k2"])
    assert {key: found.attempt_id for key, found in got.items()} == {
        "k1": "first",
        "k2": "second",
    }
    assert store.get_many([]) == {}


def test_create_on_taken_key_raises_and_keeps_the_first(store):
    store.create("k1", record("first"))
    with pytest.raises(RecordExists):
        store.create("k1", record("second"))
    assert store.get("k1").record.attempt_id == "first"


def test_update_at_current_version_applies_and_returns_a_new_version(store):
    version = store.create("k1", record())
    new_version = store.update("k1", {"status": "completed"}, version)
    assert new_version != version
    got = store.get("k1")
    assert got.record.status is Status.COMPLETED
    assert got.version == new_version


def test_update_at_stale_version_is_refused(store):
    old = store.create("k1", record())
    store.update("k1", {"attempts": 2}, old)
    with pytest.raises(VersionConflict):
        store.update("k1", {"status": "completed"}, old)
    assert store.get("k1").record.status is Status.IN_PROGRESS


def test_update_of_missing_record_is_a_conflict(store):
    """As when TTL deletion removed the record after it was read: nothing is recreated."""
    version = store.create("k0", record())
    with pytest.raises(VersionConflict):
        store.update("k1", {"status": "completed"}, version)
    assert store.get("k1") is None


EPOCH = AuditEpoch("etl", "0 * * * *", "Europe/Berlin", T0)


def test_an_epoch_round_trips_and_a_second_create_keeps_the_first(store):
    version = store.create_epoch("e1", EPOCH)
    with pytest.raises(RecordExists):
        store.create_epoch("e1", AuditEpoch("etl", "*/5 * * * *", "UTC", T0))
    got = store.get_epochs(["e1", "absent"])
    assert list(got) == ["e1"]
    assert (got["e1"].epoch, got["e1"].version) == (EPOCH, version)
    assert store.get_epochs([]) == {}


def test_an_epoch_is_replaced_only_at_the_version_read(store):
    old = store.create_epoch("e1", EPOCH)
    moved = AuditEpoch("etl", "*/5 * * * *", "UTC", T0 + timedelta(hours=1))
    new = store.replace_epoch("e1", moved, old)
    assert new != old
    with pytest.raises(VersionConflict):
        store.replace_epoch("e1", EPOCH, old)
    with pytest.raises(VersionConflict):  # deleted since it was read: nothing is recreated
        store.replace_epoch("e2", EPOCH, old)
    assert store.get_epochs(["e1", "e2"]) == {"e1": store.get_epochs(["e1"])["e1"]}
    assert store.get_epochs(["e1"])["e1"].epoch == moved


def test_each_epoch_write_keeps_its_lasting_copy_and_a_refused_one_keeps_the_last(store):
    store.create_epoch("e1", EPOCH)
    assert store.get_lasting_epochs(["e1", "absent"]) == {"e1": EPOCH}
    with pytest.raises(RecordExists):
        store.create_epoch("e1", AuditEpoch("etl", "*/5 * * * *", "UTC", T0))
    old = store.get_epochs(["e1"])["e1"].version
    moved = AuditEpoch("etl", "*/5 * * * *", "UTC", T0 + timedelta(hours=1))
    store.replace_epoch("e1", moved, old)
    with pytest.raises(VersionConflict):
        store.replace_epoch("e1", EPOCH, old)
    assert store.get_lasting_epochs(["e1"]) == {"e1": moved}
    assert store.get_lasting_epochs([]) == {}


def test_a_lasting_copy_outlives_the_audit_documents_and_is_no_epoch(store, request):
    store.create_epoch("e1", EPOCH)
    _delete_audit_documents(store, request)
    assert (store.get_epochs(["e1"]), store.get_lasting_epochs(["e1"])) == ({}, {"e1": EPOCH})
    store.create_epoch("e1", EPOCH)  # written back as it was: a create, as the first
    assert store.get_epochs(["e1"])["e1"].epoch == EPOCH


def _delete_audit_documents(store, request) -> None:
    """An operator's delete of runledger_audit (every document under it)."""
    if isinstance(store, MemoryRunStore):
        store.delete_audit_documents()
        return
    db = request.getfixturevalue("firestore_db")
    db.recursive_delete(db.collection(AUDIT_COLLECTION))


def test_epochs_are_not_runs(store):
    store.create_epoch("k1", EPOCH)
    assert store.get("k1") is None
    assert store.get_many(["k1"]) == {}


# The audit's watermark shards (`runledger.ledger.watermarks`).
MARK = JobMark(
    "0 * * * *",
    "Europe/Berlin",
    T0,
    T0 + timedelta(hours=3),
    (
        OpenRun((T0 + timedelta(hours=1),), "missed"),
        OpenRun((T0 + timedelta(hours=2), T0 + timedelta(hours=3)), None),
    ),
    Sighting(T0 + timedelta(hours=3, minutes=30), True),
)


def test_a_shard_round_trips_every_mark_and_a_second_create_keeps_the_first(store):
    shard = StoredShard({"etl": MARK, "job.with.dots": replace(MARK, open=(), seen=None)}, None)
    version = store.create_shard("s1", shard)
    with pytest.raises(RecordExists):
        store.create_shard("s1", StoredShard({}, None))
    got = store.get_shards(["s1", "absent"])
    assert list(got) == ["s1"]
    assert (got["s1"].marks, got["s1"].version) == (shard.marks, version)
    assert store.get_shards([]) == {}


def test_a_shard_is_replaced_whole_and_only_at_the_version_read(store):
    old = store.create_shard("s1", StoredShard({"etl": MARK, "report": MARK}, None))
    moved = replace(MARK, judged_to=T0 + timedelta(hours=4), open=())
    new = store.replace_shard("s1", StoredShard({"etl": moved}, None), old)
    assert new != old
    with pytest.raises(VersionConflict):  # a concurrent audit wrote since: it lost
        store.replace_shard("s1", StoredShard({"etl": MARK}, None), old)
    with pytest.raises(VersionConflict):  # gone since it was read: nothing is recreated
        store.replace_shard("s2", StoredShard({"etl": MARK}, None), old)
    assert store.get_shards(["s1", "s2"])["s1"].marks == {"etl": moved}
    assert list(store.get_shards(["s1", "s2"])) == ["s1"]


def test_shards_are_neither_runs_nor_epochs(store):
    store.create_shard("k1", StoredShard({"etl": MARK}, None))
    assert (store.get("k1"), store.get_many(["k1"]), store.get_epochs(["k1"])) == (None, {}, {})


# -- the overlap slots (runledger.ledger.overlap.OverlapStore), on every store that keeps them --


def slot_store(store):
    if not isinstance(store, OverlapStore):
        pytest.skip(f"{type(store).__name__} keeps no overlap slots")
    return store


def test_a_slotted_claim_writes_the_run_and_its_slot_in_one_commit(store):
    slots = slot_store(store)
    slots.claim_slotted("k1", record(), None, "slot", None, None)
    assert slots.get("k1").record == record()
    assert slots.get_slot("slot").slot == Slot("k1", record())
    with pytest.raises(VersionConflict):  # the slot exists now: a create of it is refused
        slots.claim_slotted("k2", record("other"), None, "slot", None, None)
    assert slots.get("k2") is None


def test_a_slotted_update_writes_the_slot_whole_even_when_it_is_gone(store):
    """A missing slot (the audit's documents deleted) never fences out the run's own write."""
    slots = slot_store(store)
    version = slots.create("k1", record())  # a run whose slot is gone
    renewed = record(lease_expires=T0 + timedelta(hours=1))
    slots.update_slotted("k1", {"lease_expires": renewed.lease_expires}, version, "slot",
                         Slot("k1", renewed))  # fmt: skip
    assert slots.get("k1").record == renewed
    assert slots.get_slot("slot").slot == Slot("k1", renewed)


def test_a_slotted_update_at_a_stale_version_writes_neither(store):
    slots = slot_store(store)
    stale = slots.claim_slotted("k1", record(), None, "slot", None, None)
    slots.update("k1", {"attempts": 2}, stale)
    ended = record(status=Status.COMPLETED)
    with pytest.raises(VersionConflict):
        slots.update_slotted("k1", {"status": "completed"}, stale, "slot", Slot("k1", ended))
    assert slots.get("k1").record.status is Status.IN_PROGRESS
    assert slots.get_slot("slot").slot == Slot("k1", record())
