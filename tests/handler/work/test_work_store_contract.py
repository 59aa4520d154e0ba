"""The fenced item writes behave the same on Firestore (the emulator) and in memory."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runledger.exceptions import RecordExists, VersionConflict
from runledger.ledger.store import WorkStore
from runledger.ledger.workitem import WorkItem, WorkKind
from tests.handler.support import RETENTION, T0
from tests.handler.support import run_record as record

EXPIRE_AT = T0 + RETENTION  # the run's, which its items copy


def item(name: str = "extract", value: object = None, attempt_id: str = "a1") -> WorkItem:
    return WorkItem(
        kind=WorkKind.CHECKPOINT,
        name=name,
        value={"rows": 3, "path": "gs://b/o", "parts": [1, 2]} if value is None else value,
        run_key="k1",
        job="nightly-report",
        attempt_id=attempt_id,
        written_at=T0,
        expire_at=EXPIRE_AT,
    )


LATER = {"lease_expires": T0 + timedelta(minutes=9)}


def test_both_stores_implement_the_work_protocol(store):
    assert isinstance(store, WorkStore)


def test_fenced_create_writes_the_item_and_changes_the_run(store):
    version = store.create("k1", record())
    new_version = store.create_item_fenced("k1", version, LATER, item())
    assert new_version != version
    run = store.get("k1")
    assert run.version == new_version
    assert run.record.lease_expires == LATER["lease_expires"]
    found = store.get_items("k1", ["checkpoint:extract"])
    assert found["checkpoint:extract"].item == item()
    # One commit: the item's version is the run's new version.
    assert found["checkpoint:extract"].version == new_version


def test_fenced_create_at_a_stale_version_writes_nothing(store):
    old = store.create("k1", record())
    current = store.update("k1", {"attempts": 2}, old)
    with pytest.raises(VersionConflict):
        store.create_item_fenced("k1", old, LATER, item())
    assert store.get_items("k1", ["checkpoint:extract"]) == {}
    assert store.get("k1").version == current


def test_fenced_create_of_an_existing_item_keeps_the_first_and_the_run(store):
    version = store.create("k1", record())
    version = store.create_item_fenced("k1", version, LATER, item(value="first"))
    with pytest.raises(RecordExists):
        store.create_item_fenced("k1", version, {"lease_expires": T0}, item(value="second"))
    assert store.get_items("k1", ["checkpoint:extract"])["checkpoint:extract"].item.value == "first"
    run = store.get("k1")
    assert run.version == version
    assert run.record.lease_expires == LATER["lease_expires"]


def test_fenced_create_under_a_missing_run_is_a_conflict(store):
    """As when TTL deletion removed the run after it was read: no orphan item is left."""
    version = store.create("k0", record())
    with pytest.raises(VersionConflict):
        store.create_item_fenced("k1", version, LATER, item())
    assert store.get_items("k1", ["checkpoint:extract"]) == {}


RELEASED = {"status": "released"}


def test_fenced_delete_removes_the_items_and_changes_the_run_in_one_commit(store):
    version = store.create("k1", record())
    version = store.create_item_fenced("k1", version, LATER, item("a"))
    version = store.create_item_fenced("k1", version, LATER, item("b"))
    new_version = store.delete_items_fenced("k1", version, RELEASED, ["checkpoint:a", "output:x"])
    assert new_version != version
    run = store.get("k1")
    assert (run.version, run.record.status.value) == (new_version, "released")
    assert sorted(store.get_items("k1", ["checkpoint:a", "checkpoint:b"])) == ["checkpoint:b"]


def test_fenced_delete_at_a_stale_version_deletes_nothing(store):
    old = store.create("k1", record())
    current = store.create_item_fenced("k1", old, LATER, item("a"))
    with pytest.raises(VersionConflict):
        store.delete_items_fenced("k1", old, RELEASED, ["checkpoint:a"])
    assert sorted(store.get_items("k1", ["checkpoint:a"])) == ["checkpoint:a"]
    run = store.get("k1")
    assert (run.version, run.record.status.value) == (current, "in_progress")


def test_get_items_returns_only_existing_ones_in_one_call(store):
    version = store.create("k1", record())
    version = store.create_item_fenced("k1", version, LATER, item("a"))
    store.create_item_fenced("k1", version, LATER, item("b", value=[1, "x", None, True]))
    found = store.get_items("k1", ["checkpoint:a", "checkpoint:b", "checkpoint:zz"])
    assert sorted(found) == ["checkpoint:a", "checkpoint:b"]
    assert found["checkpoint:b"].item.value == [1, "x", None, True]
    assert store.get_items("k1", []) == {}
    assert store.get_items("other-run", ["checkpoint:a"]) == {}


def test_items_carry_the_runs_expiry_for_the_ttl_policy(store):
    version = store.create("k1", record())
    store.create_item_fenced("k1", version, LATER, item())
    stored = store.get_items("k1", ["checkpoint:extract"])["checkpoint:extract"].item
    assert stored.expire_at == store.get("k1").record.expire_at


def test_items_of_different_kinds_with_one_name_do_not_clash(store):
    version = store.create("k1", record())
    version = store.create_item_fenced("k1", version, LATER, item("x", value="stage"))
    output = WorkItem(WorkKind.OUTPUT, "x", "out", "k1", "nightly-report", "a1", T0, EXPIRE_AT)
    store.create_item_fenced("k1", version, LATER, output)
    found = store.get_items("k1", ["checkpoint:x", "output:x"])
    assert found["checkpoint:x"].item.value == "stage"
    assert found["output:x"].item.value == "out"
