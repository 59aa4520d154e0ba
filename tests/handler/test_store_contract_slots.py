"""The overlap slot's commits and the backfill documents act alike on Firestore and in memory.

The simulator (`scheduler_dedup.localrun.simulation`) runs the whole system on the memory store,
so each Firestore semantic it relies on is pinned here on both: a slotted claim
lands whole or not at all (the slotted update: tests/handler/test_store_contract.py),
and the backfill documents are created once and compare-and-set.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from runledger.backfill.firestore_store import FirestoreBackfills
from runledger.exceptions import RecordExists, VersionConflict
from runledger.ledger.memory_store import MemoryRunStore
from runledger.ledger.overlap import Slot
from tests.handler.support import T0
from tests.handler.support import run_record as record

SLOT = "slot-1"


@pytest.fixture
def backfill_docs(request, store):
    """The backfill documents beside `store`: on the emulator, or the memory store's own."""
    if isinstance(store, MemoryRunStore):
        return store.backfills()
    return FirestoreBackfills(request.getfixturevalue("firestore_db"), "scheduler_runs")


def test_a_slotted_claim_refused_by_any_precondition_writes_nothing(store):
    first = store.claim_slotted("k1", record("a1"), None, SLOT, None, None)
    slot_version = store.get_slot(SLOT).version
    # The run exists already: the create is refused, and the slot keeps its holder.
    with pytest.raises(VersionConflict):
        store.claim_slotted("k1", record("a2"), None, SLOT, slot_version, None)
    # The slot moved since read (a stale version): the new run is not created either.
    moved = replace(record("a1"), attempts=2)
    store.update_slotted("k1", {"attempts": 2}, first, SLOT, Slot("k1", moved))
    with pytest.raises(VersionConflict):
        store.claim_slotted("k2", record("b1"), None, SLOT, slot_version, None)
    assert store.get("k2") is None
    assert store.get_slot(SLOT).slot.record.attempt_id == "a1"


def test_a_slotted_claim_ends_the_dead_holders_lease_only_if_its_record_exists(store):
    store.claim_slotted("k1", record("a1"), None, SLOT, None, None)
    slot_version = store.get_slot(SLOT).version
    later = record("b1", claimed_at=T0 + timedelta(minutes=9))
    with pytest.raises(VersionConflict):
        store.claim_slotted("k2", later, None, SLOT, slot_version, "gone")
    assert store.get("k2") is None
    store.claim_slotted("k2", later, None, SLOT, slot_version, "k1")
    assert store.get("k1").record.lease_expires == later.claimed_at
    assert store.get_slot(SLOT).slot.run_key == "k2"


def test_backfill_documents_are_created_once_and_compare_and_set(backfill_docs):
    version = backfill_docs.create("r1", {"pending": ["a"], "next": 0})
    with pytest.raises(RecordExists):
        backfill_docs.create("r1", {"pending": []})
    new = backfill_docs.update("r1", {"next": 1}, version)
    data, stored = backfill_docs.get("r1")
    assert (data, stored) == ({"pending": ["a"], "next": 1}, new)
    with pytest.raises(VersionConflict):
        backfill_docs.update("r1", {"next": 2}, version)
    with pytest.raises(VersionConflict):
        backfill_docs.update("absent", {"next": 2}, version)
    assert backfill_docs.get("absent") is None
