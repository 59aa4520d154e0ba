"""The handler's and the job SDK's shared fixtures: stores, the test clock and a ledger on them.

`store` runs a test on the official emulator and on the memory store; tests
that need Firestore itself (RPC counts, the operator CLI) take `firestore_store`.
"""

from __future__ import annotations

import pytest

from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.machine import Ledger
from runledger.ledger.memory_store import MemoryRunStore
from scheduler_dedup.localrun.rpccount import RpcCounter
from tests.handler.support import FakeClock, make_ledger


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


@pytest.fixture
def clock() -> FakeClock:
    """A clock the test moves by hand, one second after the default run's schedule time."""
    return FakeClock()


@pytest.fixture
def ledger(store, clock) -> Ledger:
    """A ledger as the test app builds one (`support.make_ledger`) on `store` and `clock`."""
    return make_ledger(store, clock)
