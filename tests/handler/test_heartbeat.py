"""The heartbeat lease: a live holder keeps its run, a dead one or a lost claim frees it soon.

With DEDUP_HEARTBEAT_SECONDS a claim holds its run for that long, and the
running job's renewals (every third of it) keep extending it. Time is the
test's FakeClock and renewals run when the test says (`DrivenRenewals`), on
the emulator and on the memory store.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from runledger.delivery.identify import identify_run
from runledger.exceptions import ConfigError, StorePermissionDenied
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.record import Status
from tests.handler.support import (
    LEASE,
    DrivenRenewals,
    FakeClock,
    default_run_key,
    deliver,
    make_app,
    scheduler_headers,
    settings,
)
from tests.reliability.relsupport import Fault, FaultyStore

HEARTBEAT_S = 60
HEARTBEAT = {"DEDUP_HEARTBEAT_SECONDS": str(HEARTBEAT_S)}
PAST_HEARTBEAT = HEARTBEAT_S + MAX_CLOCK_SKEW.total_seconds()


class RecordedRenewals(DrivenRenewals):
    """Driven renewals that also keep the delay each one was scheduled with."""

    def __init__(self) -> None:
        super().__init__()
        self.delays: list[float] = []

    def after(self, delay_s, renew) -> None:
        self.delays.append(delay_s)
        super().after(delay_s, renew)


def test_a_live_holder_renewing_its_heartbeat_is_never_taken_over(store):
    clock, renewals = FakeClock(), RecordedRenewals()
    answers: list[tuple[int, str]] = []
    app_box: list = []

    def job(ctx) -> None:
        if ctx.attempt_id != "attempt-1":
            return
        for _ in range(6):  # two minutes of work, twice the heartbeat lease
            clock.advance(seconds=HEARTBEAT_S / 3)
            assert renewals.run_due() == 1
            duplicate = deliver(app_box[0])
            answers.append((duplicate.status, duplicate.outcome))

    app = make_app(store, {"nightly-report": job}, clock, renewals, **HEARTBEAT)
    app_box.append(app)
    first = deliver(app)
    assert (first.status, first.outcome) == (200, "completed")
    assert answers == [(409, "duplicate_in_progress")] * 6
    assert renewals.delays[0] == pytest.approx(HEARTBEAT_S / 3)
    record = store.get(default_run_key(app)).record
    assert (record.status, record.attempts) == (Status.COMPLETED, 1)


def test_a_holder_that_stopped_renewing_frees_its_run_after_one_heartbeat(store):
    clock = FakeClock()
    ran: list[str] = []
    app = make_app(
        store, {"nightly-report": lambda ctx: ran.append(ctx.attempt_id)}, clock, **HEARTBEAT
    )
    # A holder that died right after claiming: its claim, nothing more.
    run = identify_run(scheduler_headers(), app.settings, app.jobs, clock())
    claim = app.ledger.claim(run)
    assert claim.lease_expires == clock() + timedelta(seconds=HEARTBEAT_S)
    clock.advance(seconds=PAST_HEARTBEAT - 1)
    assert deliver(app).outcome == "duplicate_in_progress"
    clock.advance(seconds=1)
    redo = deliver(app)
    assert (redo.status, redo.outcome) == (200, "completed")
    assert len(ran) == 1
    record = store.get(run.key).record
    assert (record.status, record.attempts) == (Status.COMPLETED, 2)


@pytest.mark.timeout(60)
def test_a_claim_whose_answer_was_lost_is_given_up_before_the_answer(store):
    faulty = FaultyStore(store)
    clock = FakeClock()
    ran: list[str] = []
    app = make_app(
        faulty, {"nightly-report": lambda ctx: ran.append(ctx.attempt_id)}, clock, **HEARTBEAT
    )
    faulty.arm(Fault("create", 1, "lost_answer"))
    unsure = deliver(app)
    assert (unsure.status, unsure.outcome) == (503, "store_unavailable")
    assert "the claim had landed and was given up" in unsure.message
    faulty.arm()
    given_up = store.get(default_run_key(app)).record
    assert (given_up.status, given_up.lease_expires) == (Status.IN_PROGRESS, clock())
    assert ran == []
    # Free after the clock-skew margin, as any ended lease is.
    assert deliver(app).outcome == "duplicate_in_progress"
    clock.advance(seconds=MAX_CLOCK_SKEW.total_seconds())
    redo = deliver(app)
    assert (redo.status, redo.outcome) == (200, "completed")
    assert len(ran) == 1


@pytest.mark.timeout(60)
def test_a_lost_claim_that_cannot_be_given_up_blocks_only_one_heartbeat(store):
    faulty = FaultyStore(store)
    clock = FakeClock()
    ran: list[str] = []
    app = make_app(
        faulty, {"nightly-report": lambda ctx: ran.append(ctx.attempt_id)}, clock, **HEARTBEAT
    )
    faulty.arm(Fault("create", 1, "lost_answer"), Fault("get", 1, "unavailable"))
    unsure = deliver(app)
    assert (unsure.status, unsure.outcome) == (503, "store_unavailable")
    assert f"could not be given up: it blocks the run for at most {HEARTBEAT_S} s" in (
        unsure.message
    )
    faulty.arm()
    clock.advance(seconds=PAST_HEARTBEAT)
    redo = deliver(app)
    assert (redo.status, redo.outcome) == (200, "completed")
    assert len(ran) == 1


def test_a_claim_refused_for_permission_is_not_given_up(store):
    """A denied write did not happen: no read-back, the answer names the cause."""
    faulty = FaultyStore(store)
    app = make_app(faulty, {"nightly-report": lambda ctx: None}, FakeClock(), **HEARTBEAT)
    faulty.arm(Fault("create", 1, "hook", hook=_deny))
    reply = deliver(app)
    assert (reply.status, reply.outcome) == (503, "store_permission_denied")
    assert faulty.calls.get("get", 0) == 0


def _deny() -> None:
    raise StorePermissionDenied("injected: the grant is not applied yet")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("47", "shorter than 48 s"),
        ("soon", "positive whole number"),
        (str(int(LEASE.total_seconds()) + 1), "must not be longer than DEDUP_LEASE_SECONDS"),
    ],
)
def test_bad_heartbeat_setting_names_the_variable(value, message):
    with pytest.raises(ConfigError, match="DEDUP_HEARTBEAT_SECONDS") as raised:
        settings(DEDUP_HEARTBEAT_SECONDS=value)
    assert message in str(raised.value)


def test_without_a_heartbeat_a_claim_holds_the_whole_lease():
    assert settings().claim_lease == LEASE
    assert settings(**HEARTBEAT).claim_lease == timedelta(seconds=HEARTBEAT_S)
