"""The ledger state machine, on Firestore (the emulator) and in memory."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runledger.exceptions import LeaseLost
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.record import Status
from runledger.ledger.run import Claim, Duplicate, RunIdentity
from tests.handler.support import LEASE, T0, make_ledger

RUN = RunIdentity(
    key="run-1",
    job="nightly-report",
    schedule_time=T0,
    project="acme-prod",
    region="europe-west1",
    manual=False,
)


def test_first_claim_writes_an_in_progress_record(ledger, store, clock):
    claim = ledger.claim(RUN)
    assert isinstance(claim, Claim)
    record = store.get(RUN.key).record
    assert record.status is Status.IN_PROGRESS
    assert record.attempt_id == claim.attempt_id == "attempt-1"
    assert record.lease_expires == clock() + LEASE
    assert record.expire_at == T0 + timedelta(days=1)
    assert (record.job, record.project, record.region, record.attempts) == (
        "nightly-report",
        "acme-prod",
        "europe-west1",
        1,
    )


def test_second_claim_while_the_lease_is_live_is_an_in_progress_duplicate(ledger):
    ledger.claim(RUN)
    result = ledger.claim(RUN)
    assert isinstance(result, Duplicate)
    assert result.status is Status.IN_PROGRESS
    assert result.record.attempt_id == "attempt-1"


def test_completed_run_is_a_completed_duplicate(ledger, store):
    ledger.complete(ledger.claim(RUN))
    result = ledger.claim(RUN)
    assert isinstance(result, Duplicate)
    assert result.status is Status.COMPLETED
    assert store.get(RUN.key).record.finished_at is not None


def test_failed_run_stays_failed_with_its_reason(ledger, store, clock):
    ledger.fail(ledger.claim(RUN), "ValueError: bad input")
    clock.advance(hours=1)
    result = ledger.claim(RUN)
    assert isinstance(result, Duplicate)
    assert result.status is Status.FAILED
    assert store.get(RUN.key).record.error == "ValueError: bad input"


def test_released_run_is_claimed_again_at_once_and_counts_the_attempt(ledger, store):
    ledger.release(ledger.claim(RUN), "TimeoutError: upstream")
    claim = ledger.claim(RUN)
    assert isinstance(claim, Claim)
    assert claim.attempts == 2
    record = store.get(RUN.key).record
    assert (record.status, record.attempt_id) == (Status.IN_PROGRESS, "attempt-2")


def test_expired_lease_is_taken_over_only_after_the_skew_margin(ledger, clock):
    ledger.claim(RUN)
    clock.advance(seconds=LEASE.total_seconds())
    assert isinstance(ledger.claim(RUN), Duplicate)
    clock.advance(seconds=MAX_CLOCK_SKEW.total_seconds())
    takeover = ledger.claim(RUN)
    assert isinstance(takeover, Claim)
    assert takeover.attempts == 2


def test_late_attempt_cannot_complete_release_fail_or_renew_after_takeover(ledger, store, clock):
    late = ledger.claim(RUN)
    clock.advance(seconds=(LEASE + MAX_CLOCK_SKEW).total_seconds())
    newer = ledger.claim(RUN)
    for finish in (ledger.complete, ledger.renew):
        with pytest.raises(LeaseLost):
            finish(late)
    for finish in (ledger.release, ledger.fail):
        with pytest.raises(LeaseLost):
            finish(late, "boom")
    record = store.get(RUN.key).record
    assert (record.status, record.attempt_id) == (Status.IN_PROGRESS, newer.attempt_id)


def test_renewal_extends_the_lease_and_keeps_the_claim_fenced(ledger, store, clock):
    claim = ledger.claim(RUN)
    clock.advance(minutes=2)
    renewed = ledger.renew(claim)
    assert renewed.lease_expires == clock() + LEASE
    assert store.get(RUN.key).record.lease_expires == renewed.lease_expires
    assert store.get(RUN.key).version != claim.version
    # The pre-renewal claim is stale, but only our own renewal moved it (its answer lost,
    # say): the run is still ours to end.
    ledger.complete(claim)
    assert store.get(RUN.key).record.status is Status.COMPLETED


def test_a_final_write_after_a_takeover_ended_the_lease_is_refused(ledger, store, clock):
    claim = ledger.claim(RUN)
    store.update(RUN.key, {"lease_expires": clock()}, claim.version)  # a slot takeover's end
    with pytest.raises(LeaseLost):
        ledger.complete(claim)
    assert store.get(RUN.key).record.status is Status.IN_PROGRESS


def test_record_past_expire_at_counts_as_absent(ledger, store, clock):
    ledger.complete(ledger.claim(RUN))
    clock.advance(days=2)
    claim = ledger.claim(RUN)
    assert isinstance(claim, Claim)
    assert claim.attempts == 1
    assert store.get(RUN.key).record.status is Status.IN_PROGRESS


def test_lost_answer_to_our_own_create_still_yields_the_claim(store, clock):
    """A create retried after its first try landed must not look like a duplicate."""
    ledger = make_ledger(store, clock, new_attempt_id=lambda: "same-attempt")
    ledger.claim(RUN)
    again = ledger.claim(RUN)
    assert isinstance(again, Claim)
    assert again.attempt_id == "same-attempt"


def test_error_detail_is_bounded(ledger, store):
    ledger.fail(ledger.claim(RUN), "x" * 10_000)
    assert len(store.get(RUN.key).record.error) == 1000
