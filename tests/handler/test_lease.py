"""Background renewal: leases of running work are renewed, on a scheduler's shared threads."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from runledger.exceptions import LeaseLost, StoreUnavailable
from runledger.ledger.lease import LeaseKeeper, RenewalScheduler
from runledger.ledger.machine import Ledger
from runledger.ledger.memory_store import MemoryRunStore
from runledger.ledger.record import Status
from runledger.ledger.run import RunIdentity
from tests.handler.support import T0, DrivenRenewals, FakeClock, make_ledger

# Real time: long enough that a renewal thread a loaded machine stalls still renews in time.
LEASE = timedelta(seconds=3)


def run(key: str) -> RunIdentity:
    return RunIdentity(key, "nightly-report", T0, "acme-prod", "europe-west1", manual=False)


def real_time_ledger(store: MemoryRunStore) -> Ledger:
    return make_ledger(store, lambda: datetime.now(UTC), lease=LEASE)


def wait_until(condition, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_running_work_keeps_its_lease_and_stop_ends_renewal():
    store = MemoryRunStore()
    ledger = real_time_ledger(store)
    claim = ledger.claim(run("k1"))
    keeper = LeaseKeeper(ledger, claim, on_lost=print, renewals=RenewalScheduler())
    keeper.start()
    assert wait_until(lambda: store.get("k1").record.lease_expires > claim.lease_expires)
    assert wait_until(lambda: datetime.now(UTC) > claim.lease_expires + LEASE)
    assert keeper.held()
    final = keeper.stop()
    assert final.version == store.get("k1").version
    time.sleep(LEASE.total_seconds())
    assert store.get("k1").version == final.version
    ledger.complete(final)


def test_a_takeover_seen_by_renewal_marks_the_lease_lost():
    store = MemoryRunStore()
    ledger = real_time_ledger(store)
    claim = ledger.claim(run("k1"))
    lost: list[str] = []
    keeper = LeaseKeeper(ledger, claim, on_lost=lost.append, renewals=RenewalScheduler())
    store.update("k1", {"attempt_id": "someone-else"}, claim.version)
    keeper.start()
    assert wait_until(lambda: bool(lost))
    assert not keeper.held()
    keeper.stop()


def test_many_leases_share_a_few_renewal_threads():
    store = MemoryRunStore()
    ledger = real_time_ledger(store)
    claims = [ledger.claim(run(f"k{i}")) for i in range(40)]
    renewals = RenewalScheduler()
    keepers = [LeaseKeeper(ledger, claim, print, renewals) for claim in claims]
    before = set(threading.enumerate())
    for keeper in keepers:
        keeper.start()
    renewed = wait_until(
        lambda: all(k.claim.version != c.version for k, c in zip(keepers, claims, strict=True))
    )
    started = [t for t in threading.enumerate() if t not in before]
    for keeper in keepers:
        keeper.stop()
    assert renewed
    assert len(started) <= 5 and all(t.name.startswith("lease-") for t in started)


class LosesNextUpdateAnswer(MemoryRunStore):
    """Applies the next update, then reports the store unreachable: a lost answer."""

    lose_next = False

    def update(self, key, changes, version):
        new_version = super().update(key, changes, version)
        if self.lose_next:
            self.lose_next = False
            raise StoreUnavailable("answer lost")
        return new_version


def test_renewal_that_landed_unseen_keeps_the_run_past_the_old_lease():
    store = LosesNextUpdateAnswer()
    clock = FakeClock()
    ledger = make_ledger(store, clock)
    claim = ledger.claim(run("k1"))
    keeper = LeaseKeeper(ledger, claim, on_lost=print, renewals=DrivenRenewals())
    clock.advance(seconds=ledger.lease.total_seconds())
    store.lose_next = True
    keeper.renew_now()
    assert store.get("k1").record.lease_expires > claim.lease_expires
    assert keeper.held()
    assert keeper.claim.version == store.get("k1").version
    ledger.complete(keeper.stop())
    assert store.get("k1").record.status is Status.COMPLETED


class AlsoFailsNextRead(LosesNextUpdateAnswer):
    fail_next_get = False

    def get(self, key):
        if self.fail_next_get:
            self.fail_next_get = False
            raise StoreUnavailable("unreachable")
        return super().get(key)


def test_a_final_write_after_an_unseen_renewal_and_an_unread_record_still_lands():
    """The renewal landed with its answer lost, and the read back before the final write
    failed: the final write meets a version our renewal moved, and still records the run."""
    store = AlsoFailsNextRead()
    clock = FakeClock()
    ledger = make_ledger(store, clock)
    claim = ledger.claim(run("k1"))
    keeper = LeaseKeeper(ledger, claim, on_lost=print, renewals=DrivenRenewals())
    clock.advance(seconds=ledger.lease.total_seconds() / 3)
    store.lose_next = True
    keeper.renew_now()
    store.fail_next_get = True
    final = keeper.stop()
    assert final.version != store.get("k1").version  # the claim still has the old version

    ledger.complete(final)

    assert store.get("k1").record.status is Status.COMPLETED


def test_a_final_write_of_a_run_another_attempt_took_over_is_refused():
    store = MemoryRunStore()
    ledger = make_ledger(store, FakeClock())
    claim = ledger.claim(run("k1"))
    store.update("k1", {"attempt_id": "someone-else"}, claim.version)
    with pytest.raises(LeaseLost):
        ledger.complete(claim)
    assert store.get("k1").record.status is Status.IN_PROGRESS


class SlowStore(MemoryRunStore):
    """A store whose every update takes `took` on the ledger's (fake) clock."""

    def __init__(self, clock: FakeClock, took: timedelta) -> None:
        super().__init__()
        self._clock, self._took = clock, took

    def update(self, *args, **kwargs):
        self._clock.advance(seconds=self._took.total_seconds())
        return super().update(*args, **kwargs)


class RecordedRenewals(DrivenRenewals):
    def __init__(self) -> None:
        super().__init__()
        self.delays: list[float] = []

    def after(self, delay_s: float, renew) -> None:
        self.delays.append(delay_s)
        super().after(delay_s, renew)


def test_the_next_renewal_is_timed_by_the_ledgers_clock_so_a_fake_clock_replays_it():
    clock = FakeClock(T0)
    store = SlowStore(clock, timedelta(seconds=4))
    ledger = make_ledger(store, clock, lease=timedelta(seconds=60))
    renewals = RecordedRenewals()
    keeper = LeaseKeeper(ledger, ledger.claim(run("k1")), on_lost=print, renewals=renewals)
    keeper.start()
    renewals.run_due()  # the renewal's write takes 4 s by the ledger's clock
    # Due a third of a lease after the last renewal began, whatever the machine's load.
    assert renewals.delays == [20.0, 16.0]
    keeper.stop()
