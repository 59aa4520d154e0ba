"""Fixtures for the reliability suite: real handler processes that are always reaped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.memory_store import MemoryRunStore
from runledger.ledger.store import RunStore
from scheduler_dedup.localrun.emulator import FirestoreEmulator
from tests.reliability.relsupport import Servers


@pytest.fixture
def servers() -> Iterator[Servers]:
    pool = Servers()
    try:
        yield pool
    finally:
        pool.reap()


@pytest.fixture
def clean_emulator(firestore_emulator: FirestoreEmulator) -> FirestoreEmulator:
    """The session emulator, emptied, for tests that do not stop it."""
    firestore_emulator.clear()
    return firestore_emulator


@pytest.fixture
def fault_dir(tmp_path: Path) -> Path:
    path = tmp_path / "faults"
    path.mkdir()
    return path


@pytest.fixture
def rel_firestore_store(firestore_db) -> FirestoreRunStore:
    """A Firestore RunStore on the emptied session emulator."""
    return FirestoreRunStore(firestore_db, "rel_runs")


@pytest.fixture(params=["memory", "firestore"])
def base_store(request: pytest.FixtureRequest) -> RunStore:
    """In-process fault tests run on the memory store and on the real emulator."""
    if request.param == "memory":
        return MemoryRunStore()
    return request.getfixturevalue("rel_firestore_store")
