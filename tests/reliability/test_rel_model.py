"""A hypothesis model of the run ledger driven through the real App.

Random sequences of deliveries of two runs from two instances (clocks skewed
within +-1 s, so within MAX_CLOCK_SKEW of each other), with, per delivery: a job
that succeeds, fails retryably, fails terminally or dies; a store fault at one
primitive call (unreachable, answer lost, process death before/after the write);
and, while the job runs, clock jumps (lease expiry), explicit renewals, lease
checks and concurrent duplicate deliveries from either instance.

Invariants checked at every step:
* at most one attempt holds a live lease on a run (each by its own clock);
* `completed` and `failed` are final: once seen, the record never changes;
* a completed run's work ran once, unless the extra execution's attempt was told
  it lost the lease (409 lease_lost, logged as a WARNING), could not record its
  outcome (503) or died; every such extra execution carried the same run key;
* every delivery gets a status code consistent with the record it leaves.

The full search runs on MemoryRunStore; a bounded sample of the same state
machine runs on the official Firestore emulator.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from runledger.delivery import pipeline as pipeline_module
from runledger.exceptions import TerminalJobError
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.lease import LeaseKeeper
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.memory_store import MemoryRunStore
from runledger.ledger.record import FINAL_STATUSES, RunRecord, Status
from runledger.ledger.store import RunStore
from runledger.sdk.context import RunContext
from runledger.service.app import App, Response
from scheduler_dedup.localrun.emulator import FirestoreEmulator
from tests.handler.support import T0, DrivenRenewals, FakeClock, scheduler_headers, sequential_ids
from tests.handler.support import settings as app_settings
from tests.reliability.relsupport import Crash, Fault, FaultyStore, log_entries

JOB = "nightly-report"
RUN_TIMES = ("2026-10-16T12:00:00Z", "2026-10-16T11:00:00Z")
LEASE = timedelta(seconds=300)
ENDINGS = ("ok", "retryable", "terminal", "dies")
ADVANCES = (1, 60, 298, 300, 301, 302, 303, 400)

faults = st.one_of(
    st.none(),
    st.builds(
        Fault,
        # Updates (renewals and completions) carry most of the state machine: weight them.
        op=st.sampled_from(["create", "get", "update", "update"]),
        nth=st.integers(1, 2),
        kind=st.sampled_from(["unavailable", "lost_answer", "crash_before", "crash_after"]),
    ),
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.sampled_from(ADVANCES)),
        st.tuples(st.just("renew")),
        st.tuples(st.just("ensure")),
        st.tuples(st.just("dup"), st.integers(0, 1), st.sampled_from(ENDINGS)),
    ),
    max_size=3,
)


class TrackingKeeper(LeaseKeeper):
    """LeaseKeeper that lets the model stop the renewal of an attempt that 'died'."""

    made: list[TrackingKeeper] = []  # noqa: RUF012 - one list for the patched class

    def start(self) -> None:
        TrackingKeeper.made.append(self)
        super().start()

    def die(self) -> None:
        """A dead process renews nothing and writes nothing: just stop renewing."""
        self.halt()

    @classmethod
    def of(cls, attempt_id: str) -> TrackingKeeper:
        """The keeper of the attempt `attempt_id` (ids are unique across instances)."""
        return next(k for k in cls.made if k.claim.attempt_id == attempt_id)


class Skewed:
    def __init__(self, true_clock: FakeClock, offset_s: float) -> None:
        self.true_clock = true_clock
        self.offset = timedelta(seconds=offset_s)

    def __call__(self) -> datetime:
        return self.true_clock() + self.offset


@dataclass
class Outcome:
    instance: int
    run: int
    reply: Response | None  # None: the attempt died
    attempt: str | None  # the claimant's attempt id, when this delivery claimed
    lines: list[dict[str, Any]] = field(default_factory=list)


class LedgerModel(RuleBasedStateMachine):
    """Drive two App instances over one shared store; check invariants after each step."""

    store_factory: Any = staticmethod(MemoryRunStore)

    def __init__(self) -> None:
        super().__init__()
        self.inner: RunStore = self.store_factory()
        self.store = FaultyStore(self.inner)
        self.true_clock = FakeClock()
        self.clocks: list[Skewed] = []
        self.apps: list[App] = []
        self.keys: list[str] = []
        self.active: list[RunContext] = []  # jobs running now, outermost first
        self.scripts: list[tuple[list[tuple], str]] = []
        self.effects: dict[str, list[str]] = {}
        self.outcomes: list[Outcome] = []
        self.finals: dict[str, tuple[Status, str]] = {}
        TrackingKeeper.made.clear()

    @initialize(offsets=st.tuples(st.floats(-1, 1), st.floats(-1, 1)))
    def start_instances(self, offsets: tuple[float, float]) -> None:
        for index, offset in enumerate(offsets):
            clock = Skewed(self.true_clock, offset)
            self.clocks.append(clock)
            self.apps.append(
                App(
                    app_settings(),
                    {JOB: self._job},
                    lambda: self.store,
                    clock=clock,
                    new_attempt_id=sequential_ids(f"i{index}"),
                    renewals=DrivenRenewals(),
                )
            )
        for when in RUN_TIMES:
            self.keys.append(_key_of(self.apps[0], scheduler_headers(schedule_time=when)))

    # --- the job every delivery runs -----------------------------------------------------

    def _job(self, ctx: RunContext) -> None:
        script, ending = self.scripts.pop()
        same_run = [c for c in self.active if c.run_id == ctx.run_id]
        live = [c.attempt_id for c in [*same_run, ctx] if c.lease_held()]
        assert len(live) <= 1, f"two live leases on one run: {live}"
        self.active.append(ctx)
        try:
            for step in script:
                if step[0] == "advance":
                    self.true_clock.advance(seconds=step[1])
                elif step[0] == "renew":
                    TrackingKeeper.of(ctx.attempt_id).renew_now()
                elif step[0] == "ensure":
                    ctx.ensure_lease()
                else:
                    run = self.keys.index(ctx.run_id)
                    self._deliver(step[1], run, [], step[2], nested=True)
        finally:
            self.active.pop()
        if ending == "retryable":
            raise RuntimeError("retryable failure")
        if ending == "terminal":
            raise TerminalJobError("terminal failure")
        if ending == "dies":
            raise Crash("the process died during the work")
        self.effects.setdefault(ctx.run_id, []).append(ctx.attempt_id)

    # --- deliveries ------------------------------------------------------------------------

    def _deliver(self, instance: int, run: int, script: list, ending: str, nested: bool) -> None:
        self.scripts.append((script, ending))
        depth = len(self.scripts)
        first_keeper = len(TrackingKeeper.made)
        out = io.StringIO()
        reply: Response | None = None
        try:
            with contextlib.redirect_stdout(out):
                reply = self.apps[instance].handle(
                    "POST", scheduler_headers(schedule_time=RUN_TIMES[run]), b""
                )
        except Crash:
            for keeper in TrackingKeeper.made[first_keeper:]:
                keeper.die()
            if not nested:
                raise
        finally:
            del self.scripts[depth - 1 :]
        lines = log_entries(out.getvalue())
        final = [e for e in lines if e.get("outcome") and "status" in e]
        attempt = None
        if reply is not None:
            assert final and final[-1]["status"] == reply.status
            if reply.outcome in ("completed", "failed_terminal", "failed_retryable", "lease_lost"):
                attempt = final[-1]["attempt_id"]
        outcome = Outcome(instance, run, reply, attempt, lines)
        self.outcomes.append(outcome)
        if reply is not None:
            self._check_reply(outcome)

    @rule(
        instance=st.integers(0, 1),
        run=st.integers(0, 1),
        ending=st.sampled_from(ENDINGS),
        fault=faults,
        script=steps,
    )
    def deliver(
        self, instance: int, run: int, ending: str, fault: Fault | None, script: list
    ) -> None:
        self.store.arm(*([fault] if fault else []))
        try:
            self._deliver(instance, run, script, ending, nested=False)
        except Crash:
            self.outcomes.append(Outcome(instance, run, None, None))
        finally:
            self.store.arm()

    @rule(seconds=st.sampled_from(ADVANCES))
    def time_passes(self, seconds: int) -> None:
        self.true_clock.advance(seconds=seconds)

    # --- checks -----------------------------------------------------------------------------

    def _record(self, run: int) -> RunRecord | None:
        current = self.inner.get(self.keys[run])
        return None if current is None else current.record

    def _check_reply(self, outcome: Outcome) -> None:
        reply, record = outcome.reply, self._record(outcome.run)
        assert reply is not None
        now = self.clocks[outcome.instance]()
        state = None if record is None else (record.status, record.attempt_id)
        match (reply.status, reply.outcome):
            case (200, "completed"):
                assert state == (Status.COMPLETED, outcome.attempt)
            case (200, "duplicate_completed"):
                assert record is not None and record.status is Status.COMPLETED
            case (422, "failed_terminal"):
                assert state == (Status.FAILED, outcome.attempt)
            case (422, "duplicate_failed"):
                assert record is not None and record.status is Status.FAILED
            case (500, "failed_retryable"):
                assert state == (Status.RELEASED, outcome.attempt)
            case (409, "duplicate_in_progress"):
                assert record is not None and record.status is Status.IN_PROGRESS
                assert now < record.lease_expires + MAX_CLOCK_SKEW
            case (409, "lease_lost"):
                said = outcome.lines[-1]
                assert (said["severity"], said["outcome"]) == ("WARNING", "lease_lost")
                assert said["attempt_id"] == outcome.attempt
                assert record is not None
                if record.attempt_id == outcome.attempt:
                    # Not taken over: the job stopped itself because its own lease ran out.
                    assert record.status is Status.IN_PROGRESS
                    assert now >= record.lease_expires
            case (503, "store_unavailable"):
                pass  # outcome unknown to the handler; Scheduler retries
            case _:
                raise AssertionError(f"unexpected answer {reply}")

    @invariant()
    def finals_are_final(self) -> None:
        for run in range(len(self.keys)):
            record = self._record(run)
            key = self.keys[run]
            if key in self.finals:
                assert record is not None
                assert (record.status, record.attempt_id) == self.finals[key]
            elif record is not None and record.status in FINAL_STATUSES:
                self.finals[key] = (record.status, record.attempt_id)

    @invariant()
    def work_ran_once_unless_an_attempt_was_told_otherwise(self) -> None:
        for run, key in enumerate(self.keys):
            mine = [o for o in self.outcomes if o.run == run]
            completed = [o for o in mine if o.reply is not None and o.reply.outcome == "completed"]
            assert len(completed) <= 1, "two deliveries of one run were told 'completed'"
            ran = self.effects.get(key, [])
            record = self._record(run)
            if completed:
                assert record is not None and record.attempt_id == completed[0].attempt
                assert completed[0].attempt in ran
            # Work can only run again after an attempt whose outcome the ledger never got:
            # it died, could not record it (503), or was told it lost the lease (409).
            unrecorded = [
                o
                for o in mine
                if o.reply is None or o.reply.status == 503 or o.reply.outcome == "lease_lost"
            ]
            if not unrecorded:
                assert len(ran) <= 1, f"work ran {len(ran)} times with no fault: {ran}"
            else:
                assert len(ran) <= 1 + len(unrecorded), (ran, unrecorded)

    @invariant()
    def no_renewal_outlives_its_delivery(self) -> None:
        for keeper in TrackingKeeper.made:
            assert not keeper.renewing, "a finished delivery left its renewal running"


def _key_of(app: App, headers: list[tuple[str, str]]) -> str:
    from runledger.delivery.identify import identify_run

    return identify_run(headers, app.settings, app.jobs, T0 + timedelta(seconds=1)).key


@contextlib.contextmanager
def _tracked_keepers() -> Iterator[None]:
    with mock.patch.object(pipeline_module, "LeaseKeeper", TrackingKeeper):
        yield


@pytest.mark.timeout(240)
def test_ledger_model_on_the_memory_store() -> None:
    with _tracked_keepers():
        run_state_machine_as_test(
            LedgerModel,
            settings=settings(
                max_examples=1000,
                stateful_step_count=12,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )


@pytest.mark.firestore
@pytest.mark.timeout(240)
def test_ledger_model_on_firestore_bounded_sample(firestore_emulator: FirestoreEmulator) -> None:
    from google.cloud import firestore

    client = firestore.Client(project=firestore_emulator.project)

    class FirestoreModel(LedgerModel):
        @staticmethod
        def store_factory() -> RunStore:
            firestore_emulator.clear()
            return FirestoreRunStore(client, "rel_model")

    with _tracked_keepers():
        run_state_machine_as_test(
            FirestoreModel,
            settings=settings(
                max_examples=8,
                stateful_step_count=8,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
