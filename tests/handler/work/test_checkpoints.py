"""Checkpoints and once-only outputs: resume after the last finished stage, never write twice.

Crash points are modelled by abandoning an attempt mid-job (its claim stays in
the ledger, as when an instance dies) and letting the next attempt take over
once the lease runs out; every test runs on the emulator and in memory.
"""

from __future__ import annotations

import pytest

from runledger.delivery.identify import run_key
from runledger.exceptions import LeaseLost, StoreUnavailable
from runledger.ledger.lease import LeaseKeeper
from runledger.ledger.machine import MAX_CLOCK_SKEW, Ledger
from runledger.ledger.record import Status
from runledger.ledger.run import Claim, RunIdentity
from runledger.sdk.context import RunContext
from tests.handler.support import LEASE, T0, DrivenRenewals, FakeClock, make_ledger

RUN = RunIdentity(
    key=run_key("etl", T0, "acme-prod", "europe-west1", False),
    job="etl",
    schedule_time=T0,
    project="acme-prod",
    region="europe-west1",
    manual=False,
)


def attempt(ledger: Ledger, lost: list[str] | None = None) -> tuple[RunContext, LeaseKeeper]:
    """Claim the run as a delivery would: the job's context and the attempt's lease keeper.

    The keeper is never started (its renewals would go to `DrivenRenewals`):
    the test drives time and renews by hand.
    """
    claim = ledger.claim(RUN)
    assert isinstance(claim, Claim), claim
    on_lost = (lost if lost is not None else []).append
    keeper = LeaseKeeper(ledger, claim, on_lost, DrivenRenewals())
    return RunContext.for_attempt(RUN, keeper, b""), keeper


def start_attempt(ledger: Ledger, lost: list[str] | None = None) -> RunContext:
    return attempt(ledger, lost)[0]


def expire_lease(clock: FakeClock) -> None:
    clock.advance(seconds=(LEASE + MAX_CLOCK_SKEW).total_seconds())


class Calls:
    """Counts how often each stage body really ran."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __call__(self, name: str, result: object):
        def body():
            self.counts[name] = self.counts.get(name, 0) + 1
            return result

        return body


def complete(keeper: LeaseKeeper, ledger: Ledger) -> None:
    ledger.complete(keeper.stop())


def test_a_takeover_resumes_after_the_last_finished_stage(ledger, clock, store):
    calls = Calls()
    first = start_attempt(ledger)
    assert first.stage("extract", calls("extract", {"rows": 120})) == {"rows": 120}
    assert first.stage("transform", calls("transform", "gs://b/t.parquet")) == "gs://b/t.parquet"
    # The instance dies here, inside "load": nothing else is written.
    expire_lease(clock)
    second, keeper = attempt(ledger)
    assert second.completed_stages(["extract", "transform", "load"]) == {
        "extract": {"rows": 120},
        "transform": "gs://b/t.parquet",
    }
    assert second.stage("extract", calls("extract", "redone")) == {"rows": 120}
    assert second.stage("transform", calls("transform", "redone")) == "gs://b/t.parquet"
    assert second.stage("load", calls("load", 120)) == 120
    complete(keeper, ledger)
    assert calls.counts == {"extract": 1, "transform": 1, "load": 1}
    record = store.get(RUN.key).record
    assert (record.status, record.attempts) == (Status.COMPLETED, 2)


def test_a_stage_interrupted_before_its_checkpoint_runs_again(ledger, clock):
    calls = Calls()
    first = start_attempt(ledger)
    first.stage("extract", calls("extract", 1))
    calls("transform", None)()  # the body ran, the attempt died before recording it
    expire_lease(clock)
    second = start_attempt(ledger)
    second.stage("extract", calls("extract", 1))
    second.stage("transform", calls("transform", 2))
    assert calls.counts == {"extract": 1, "transform": 2}


def test_an_output_written_before_a_crash_is_not_produced_again(ledger, clock, store):
    produced = []

    def produce():
        produced.append("report")
        return {"object": "gs://reports/2026-10-16.csv"}

    first = start_attempt(ledger)
    assert first.output("report", produce) == {"object": "gs://reports/2026-10-16.csv"}
    expire_lease(clock)
    second = start_attempt(ledger)
    assert second.output("report", produce) == {"object": "gs://reports/2026-10-16.csv"}
    assert second.find_output("report").attempt_id == "attempt-1"
    assert produced == ["report"]


def test_a_crash_between_producing_and_storing_an_output_repeats_the_producer(ledger, clock):
    """The documented window: the effect is repeated unless the target dedupes on the key."""
    produced = []
    first = start_attempt(ledger)
    produced.append(first.run_id)  # produce() ran, then the attempt died
    expire_lease(clock)
    second = start_attempt(ledger)
    second.output("report", lambda: produced.append(second.run_id) or "done")
    assert produced == [RUN.key, RUN.key]  # both calls carried the same idempotency key


def test_the_first_recorded_value_wins(ledger, clock):
    first = start_attempt(ledger)
    assert first.checkpoint("cursor", 10) == 10
    assert first.put_output("count", 1) == 1
    expire_lease(clock)
    second = start_attempt(ledger)
    assert second.checkpoint("cursor", 99) == 10
    assert second.put_output("count", 2) == 1


def test_a_late_attempts_checkpoint_is_refused_and_writes_nothing(ledger, clock, store):
    lost: list[str] = []
    late = start_attempt(ledger, lost)
    late.stage("extract", lambda: 1)
    expire_lease(clock)
    newer, keeper = attempt(ledger)
    with pytest.raises(LeaseLost):
        late.checkpoint("transform", "late")
    assert len(lost) == 1
    # Refused locally from now on, without another round trip.
    with pytest.raises(LeaseLost):
        late.put_output("report", "late")
    with pytest.raises(LeaseLost):
        late.output("summary", lambda: pytest.fail("a late attempt must not produce"))
    assert newer.completed_stages(["extract", "transform"]) == {"extract": 1}
    assert newer.find_output("report") is None
    assert newer.checkpoint("transform", "newer") == "newer"
    complete(keeper, ledger)
    assert store.get(RUN.key).record.attempt_id == "attempt-2"


def test_a_late_attempt_cannot_write_even_before_it_notices(ledger, clock):
    late = start_attempt(ledger)
    expire_lease(clock)
    start_attempt(ledger)
    # The late attempt's cache knows nothing is there; the fence still refuses it.
    with pytest.raises(LeaseLost):
        late.put_output("report", "late")


def test_checkpoints_renew_the_lease_and_completion_uses_the_new_version(ledger, clock, store):
    ctx, keeper = attempt(ledger)
    clock.advance(minutes=4)
    ctx.checkpoint("extract", 1)
    assert keeper.claim.lease_expires == clock() + LEASE
    clock.advance(minutes=4)  # past the claim's first lease, inside the renewed one
    assert ctx.lease_held()
    complete(keeper, ledger)
    assert store.get(RUN.key).record.status is Status.COMPLETED


class LostAnswers:
    """Wraps a store so that item writes lose their answer, after or instead of landing."""

    def __init__(self, inner, land: bool) -> None:
        self._inner = inner
        self._land = land

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def create_item_fenced(self, key, version, run_changes, item):
        if self._land:
            self._inner.create_item_fenced(key, version, run_changes, item)
        raise StoreUnavailable("connection reset")


@pytest.mark.parametrize("land", [True, False])
def test_a_write_whose_answer_was_lost_is_settled_from_the_store(store, clock, land):
    ledger = make_ledger(LostAnswers(store, land), clock)
    ctx, keeper = attempt(ledger)
    if land:
        assert ctx.checkpoint("extract", 1) == 1
    else:
        with pytest.raises(StoreUnavailable):
            ctx.checkpoint("extract", 1)
    assert ctx.lease_held()
    # Either way the claim is current, so the run can still be completed.
    complete(keeper, ledger)
    assert store.get(RUN.key).record.status is Status.COMPLETED
    assert bool(store.get_items(RUN.key, ["checkpoint:extract"])) is land


def test_values_come_back_as_firestore_returns_them(ledger, clock):
    first = start_attempt(ledger)
    value = {"ids": (1, 2), "when": T0, "raw": b"\x00\x01", "none": None, "ok": True}
    assert first.checkpoint("extract", value) == {
        "ids": [1, 2],
        "when": T0,
        "raw": b"\x00\x01",
        "none": None,
        "ok": True,
    }
    expire_lease(clock)
    second = start_attempt(ledger)
    assert (
        second.completed_stages(["extract"])["extract"]
        == first.completed_stages(["extract"])["extract"]
    )


@pytest.mark.parametrize(
    "bad",
    [
        object(),
        {1: "int key"},
        {"d": T0.date()},
        "x" * (70 * 1024),
        {"naive": T0.replace(tzinfo=None)},
    ],
)
def test_unstorable_values_are_refused_before_anything_is_written(ledger, store, bad):
    ctx = start_attempt(ledger)
    version = store.get(RUN.key).version
    with pytest.raises(ValueError):
        ctx.checkpoint("extract", bad)
    assert store.get(RUN.key).version == version
    assert store.get_items(RUN.key, ["checkpoint:extract"]) == {}


def test_bad_names_are_refused(ledger):
    ctx = start_attempt(ledger)
    with pytest.raises(ValueError):
        ctx.checkpoint("a/b", 1)
    with pytest.raises(ValueError):
        ctx.output("", lambda: 1)


class LostRenewalAnswer:
    """Wraps a store so that the next update lands but its answer is lost."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.armed = False

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def update(self, key, changes, version):
        result = self._inner.update(key, changes, version)
        if self.armed:
            self.armed = False
            raise StoreUnavailable("answer lost")
        return result


def test_a_checkpoint_after_a_renewal_whose_answer_was_lost(store, clock):
    flaky = LostRenewalAnswer(store)
    ledger = make_ledger(flaky, clock)
    ctx, keeper = attempt(ledger)
    flaky.armed = True
    clock.advance(minutes=2)
    keeper.renew_now()  # landed; the keeper only knows the outcome is unknown
    assert ctx.checkpoint("extract", 1) == 1
    complete(keeper, ledger)
    assert store.get(RUN.key).record.status is Status.COMPLETED


def test_a_claim_behind_our_own_record_is_caught_up_not_treated_as_lost(ledger, store, clock):
    ctx, keeper = attempt(ledger)
    claim = keeper.claim
    store.update(RUN.key, {"lease_expires": claim.lease_expires}, claim.version)  # "our" write
    assert ctx.checkpoint("extract", 1) == 1
    assert ctx.lease_held()
    complete(keeper, ledger)
    assert store.get(RUN.key).record.status is Status.COMPLETED
