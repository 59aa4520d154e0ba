"""LeaseKeeper.fenced_write: the claim a fenced write produces is the one later writes use."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runledger.exceptions import LeaseLost, VersionConflict
from runledger.ledger.lease import LeaseKeeper
from runledger.ledger.memory_store import MemoryRunStore
from runledger.ledger.run import Claim, RunIdentity
from tests.handler.support import T0, DrivenRenewals, FakeClock, make_ledger

RUN = RunIdentity("k" * 64, "etl", T0, "acme-prod", "europe-west1", False)


@pytest.fixture
def setup():
    store = MemoryRunStore()
    clock = FakeClock()
    ledger = make_ledger(store, clock)
    claim = ledger.claim(RUN)
    assert isinstance(claim, Claim)
    lost: list[str] = []
    return store, ledger, LeaseKeeper(ledger, claim, lost.append, DrivenRenewals()), lost


def test_the_new_claim_is_adopted_and_renewal_builds_on_it(setup):
    store, ledger, keeper, lost = setup

    def write(claim: Claim) -> tuple[Claim, str]:
        version = store.update(RUN.key, {"attempts": 1}, claim.version)
        return replace(claim, version=version), "written"

    assert keeper.fenced_write(write) == "written"
    assert keeper.claim.version == store.get(RUN.key).version
    keeper.renew_now()  # fenced by the adopted version: succeeds
    assert keeper.held()
    assert lost == []
    ledger.complete(keeper.stop())


def test_a_lost_lease_is_remembered_and_later_writes_are_refused_locally(setup):
    store, _, keeper, lost = setup
    calls = []

    def stale_write(claim: Claim) -> tuple[Claim, None]:
        calls.append(claim)
        try:
            store.update(RUN.key, {"attempts": 1}, "not-the-version")
        except VersionConflict as exc:
            raise LeaseLost("taken over") from exc
        return claim, None

    with pytest.raises(LeaseLost):
        keeper.fenced_write(stale_write)
    assert lost == ["taken over"]
    assert not keeper.held()
    with pytest.raises(LeaseLost):
        keeper.fenced_write(stale_write)
    assert len(calls) == 1


def test_other_errors_leave_the_claim_and_the_lease_alone(setup):
    _, _, keeper, lost = setup
    before = keeper.claim

    def broken(claim: Claim) -> tuple[Claim, None]:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        keeper.fenced_write(broken)
    assert keeper.claim == before
    assert keeper.held()
    assert lost == []
