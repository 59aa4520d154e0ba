"""The run store primitives (get, batch get, create, fenced update) act alike everywhere.

Each test runs on the Firestore emulator and on the in-memory store.
"""

from __future__ import annotations

import pytest

from runledger.exceptions import RecordExists, VersionConflict
from runledger.record import Status
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
