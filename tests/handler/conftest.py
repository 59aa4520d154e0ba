"""Stores for the parametrised tests: the official emulator, and memory for speed."""

from __future__ import annotations

import pytest

from localrun.rpccount import RpcCounter
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.memory_store import MemoryRunStore


@pytest.fixture
def firestore_store(firestore_db) -> FirestoreRunStore:
    return FirestoreRunStore(firestore_db, "scheduler_runs")


@pytest.fixture
def rpc_counter(firestore_db) -> RpcCounter:
    return RpcCounter().attach(firestore_db)


@pytest.fixture(params=["firestore", "memory"])
def store(request):
    """Every ledger test runs on Firestore (the emulator) and on the memory store."""
    if request.param == "memory":
        return MemoryRunStore()
    return request.getfixturevalue("firestore_store")
