"""A job's suspension document acts alike on Firestore and in memory (`ledger.suspension`).

The simulator runs the whole system on the memory store, so each semantic the
suspension relies on is pinned on both: created once, compare-and-set on the
version read, round-tripped whole (timestamps included), and kept apart from the
audit's working documents.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from runledger.exceptions import RecordExists, VersionConflict
from runledger.ledger.memory_store import MemoryRunStore
from runledger.ledger.suspension import (
    REASON_OPERATOR,
    Suspension,
    SuspensionRefused,
    change,
    counted,
    resumed_by,
    suspended_by,
)
from tests.handler.support import T0

KEY = "suspension-1"


def test_a_suspension_is_created_once_and_replaced_only_at_its_version(store):
    first = Suspension("etl", failures=1, last_time=T0)
    version = store.create_suspension(KEY, first)
    with pytest.raises(RecordExists):
        store.create_suspension(KEY, Suspension("etl"))
    held = replace(first, suspended=True, reason=REASON_OPERATOR, note="INC-1", by="ana", since=T0)
    store.replace_suspension(KEY, held, version)
    with pytest.raises(VersionConflict):
        store.replace_suspension(KEY, first, version)  # the version moved on
    with pytest.raises(VersionConflict):
        store.replace_suspension("absent", first, version)
    assert store.get_suspension(KEY).suspension == held
    assert store.get_suspension("absent") is None


def test_counting_suspends_at_the_threshold_and_a_completion_resets(store):
    def count(minutes: int, failed: bool) -> Suspension:
        when = T0 + timedelta(minutes=minutes)
        return change(store, KEY, "etl", counted(when, failed, 2, T0 + timedelta(hours=1), "boom"))

    assert count(0, True).failures == 1
    assert count(0, True).failures == 1  # the same time again counts once
    assert (count(5, False).failures, count(10, True).failures) == (0, 1)
    assert count(3, True).failures == 1  # older than a time counted since: ignored
    held = count(15, True)
    assert (held.suspended, held.reason, held.failures) == (True, "failures", 2)
    assert held.note.startswith("2 scheduled runs in a row failed for good") and "boom" in held.note
    assert store.get_suspension(KEY).suspension == held


def test_operator_steps_refuse_what_they_cannot_do_and_write_nothing(store):
    with pytest.raises(SuspensionRefused, match="'etl' is not suspended"):
        change(store, KEY, "etl", resumed_by(None, "ana", T0))
    assert store.get_suspension(KEY) is None
    change(store, KEY, "etl", suspended_by("partner outage", "ana", T0))
    before = store.get_suspension(KEY)
    with pytest.raises(SuspensionRefused, match="suspended already"):
        change(store, KEY, "etl", suspended_by("again", "bo", T0))
    assert store.get_suspension(KEY) == before
    after = change(store, KEY, "etl", resumed_by("fixed", "bo", T0 + timedelta(hours=1)))
    assert (after.suspended, after.resumed_by, after.resume_note) == (False, "bo", "fixed")


def test_deleting_the_audits_documents_keeps_suspensions():
    store = MemoryRunStore()
    change(store, KEY, "etl", suspended_by("partner outage", "ana", T0))
    store.delete_audit_documents()
    assert store.get_suspension(KEY).suspension.suspended
