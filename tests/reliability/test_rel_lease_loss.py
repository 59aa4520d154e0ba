"""Lease lost while the work runs, and clock skew between instances.

A late attempt - its renewals blocked, or its clock jumped past the lease -
must not complete, release or fail the run a newer attempt took over, and its
log line must say what happened. Two instances whose clocks disagree by no more
than MAX_CLOCK_SKEW never both hold a live lease; the bound is shown to matter
by the counter-example just beyond it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runledger.delivery.identify import parse_schedule_time, run_key
from runledger.exceptions import TerminalJobError
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.memory_store import MemoryRunStore
from runledger.ledger.record import Status
from runledger.ledger.store import RunStore
from runledger.sdk.context import RunContext
from runledger.service.app import App
from scheduler_dedup.localrun.emulator import FirestoreEmulator
from tests.handler.support import (
    DrivenRenewals,
    FakeClock,
    make_app,
    scheduler_headers,
    sequential_ids,
)
from tests.handler.support import (
    settings as app_settings,
)
from tests.reliability.netfault import TcpLink
from tests.reliability.relsupport import (
    Fault,
    FaultyStore,
    Servers,
    completed_work,
    deliver,
    log_entries,
    probe_run,
    server_env,
    wait_for,
)

LEASE_S = 300
PAST_LEASE = LEASE_S + MAX_CLOCK_SKEW.total_seconds()


def _capture(action: Callable[[], object]) -> tuple[object, list[dict]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = action()
    return result, log_entries(out.getvalue())


def _late_attempt_app(store: RunStore, late_ending: str):
    """An app whose first attempt is overtaken mid-work by a second delivery.

    While the first attempt's work runs, the clock jumps past its lease (its
    renewals are blocked: the store is unavailable for them) and a duplicate
    delivery claims and finishes the run. Then the late work ends as `late_ending`.
    """
    clock = FakeClock()
    renewals = DrivenRenewals()
    ran: list[str] = []
    inner: list[object] = []
    app_box: list = []

    def job(ctx: RunContext) -> None:
        ran.append(ctx.attempt_id)
        if len(ran) > 1:
            return  # the newer attempt: plain success
        store.arm(Fault("update", 1, "unavailable"))  # the renewal is blocked
        assert renewals.run_due() == 1
        store.arm()
        clock.advance(seconds=PAST_LEASE)
        inner.append(app_box[0].handle("POST", scheduler_headers(), b""))
        if late_ending == "retryable":
            raise RuntimeError("late attempt failed")
        if late_ending == "terminal":
            raise TerminalJobError("late attempt gave up")

    app = make_app(store, {"nightly-report": job}, clock, renewals)
    app_box.append(app)
    return app, ran, inner


@pytest.mark.timeout(60)
@pytest.mark.parametrize("late_ending", ["success", "retryable", "terminal"])
def test_late_attempt_cannot_finish_the_newer_attempts_run_and_logs_it(
    base_store: RunStore, late_ending: str
) -> None:
    store = FaultyStore(base_store)
    app, ran, inner = _late_attempt_app(store, late_ending)
    late, lines = _capture(lambda: app.handle("POST", scheduler_headers(), b""))

    assert [(r.status, r.outcome) for r in inner] == [(200, "completed")]
    assert (late.status, late.outcome) == (409, "lease_lost")
    record = base_store.get(run_key_of_default()).record
    assert (record.status, record.attempt_id, record.attempts) == (
        Status.COMPLETED,
        ran[1],
        2,
    )
    assert record.error is None, "the late attempt's error must not land on the newer record"
    late_line = [e for e in lines if e.get("attempt_id") == ran[0]]
    assert len(late_line) == 1
    assert late_line[0]["severity"] == "WARNING"
    assert late_line[0]["outcome"] == "lease_lost"
    assert "another attempt took over" in late_line[0]["message"]


def run_key_of_default() -> str:
    return run_key(
        "nightly-report",
        parse_schedule_time("2026-10-16T12:00:00Z"),
        "acme-prod",
        "europe-west1",
        False,
    )


@pytest.mark.timeout(60)
def test_renewal_after_takeover_marks_the_lease_lost_and_stops_the_job(base_store: RunStore):
    """The background renewal is the first to notice; it logs at once and ensure_lease stops."""
    clock = FakeClock()
    renewals = DrivenRenewals()
    progress: list[str] = []
    app_box: list = []

    def job(ctx: RunContext) -> None:
        progress.append("started")
        if len(progress) > 1:
            return
        clock.advance(seconds=PAST_LEASE)
        app_box[0].handle("POST", scheduler_headers(), b"")
        renewals.run_due()  # the timer fires: this attempt's renewal, and the finished one's
        ctx.ensure_lease()
        progress.append("late step ran")

    app = make_app(base_store, {"nightly-report": job}, clock, renewals)
    app_box.append(app)
    late, lines = _capture(lambda: app.handle("POST", scheduler_headers(), b""))
    assert (late.status, late.outcome) == (409, "lease_lost")
    assert "late step ran" not in progress
    noticed = [e for e in lines if e["message"] == "lease lost while the job runs"]
    assert len(noticed) == 1 and noticed[0]["severity"] == "WARNING"
    assert "no longer holds run" in noticed[0]["reason"]


@pytest.mark.timeout(60)
def test_lost_answer_renewal_then_takeover_is_still_lease_lost(base_store: RunStore):
    """The resync after a lost renewal answer adopts only the attempt's OWN record."""
    store = FaultyStore(base_store)
    clock = FakeClock()
    renewals = DrivenRenewals()
    ran: list[str] = []
    app_box: list = []

    def job(ctx: RunContext) -> None:
        ran.append(ctx.attempt_id)
        if len(ran) > 1:
            return
        clock.advance(seconds=100)
        store.arm(Fault("update", 1, "lost_answer"))
        assert renewals.run_due() == 1
        store.arm()
        clock.advance(seconds=LEASE_S + MAX_CLOCK_SKEW.total_seconds())
        app_box[0].handle("POST", scheduler_headers(), b"")

    app = make_app(store, {"nightly-report": job}, clock, renewals)
    app_box.append(app)
    late = app.handle("POST", scheduler_headers(), b"")
    assert (late.status, late.outcome) == (409, "lease_lost")
    record = base_store.get(run_key_of_default()).record
    assert (record.status, record.attempt_id) == (Status.COMPLETED, ran[1])


@pytest.mark.firestore
@pytest.mark.timeout(150)
def test_real_server_with_renewals_cut_off_is_overtaken_and_cannot_complete(
    clean_emulator: FirestoreEmulator, fault_dir: Path, servers: Servers
) -> None:
    """Instance A's link to Firestore is cut mid-work; instance B takes over after the
    lease and completes; A, reconnected, finishes its work and is refused with 409."""
    headers, key, store = probe_run(clean_emulator, "rel_lease")
    direct = server_env(clean_emulator, fault_dir, "rel_lease")
    with TcpLink.in_front_of(clean_emulator.host) as link:
        cut_off = servers.start(
            direct | {"FIRESTORE_EMULATOR_HOST": link.host, "REL_PAUSE_AT": "during"}
        )
        other = servers.start(direct)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(deliver, cut_off.url, headers, timeout_s=90)
            wait_for((fault_dir / "reached-during").exists, 60, "A to start its work")
            first = store.get(key)
            assert first is not None
            link.cut()
            takeover = None
            deadline = time.monotonic() + 40
            while takeover is None and time.monotonic() < deadline:
                reply = deliver(other.url, headers)
                assert reply.status in (200, 409), reply
                if reply.status == 200:
                    takeover = reply
                time.sleep(0.3)
            assert takeover is not None and takeover.outcome == "completed"
            link.restore()
            (fault_dir / "release-during").touch()
            late = pending.result(timeout=90)
    assert (late.status, late.outcome) == (409, "lease_lost")
    record = store.get(key).record
    assert record.status is Status.COMPLETED
    assert record.attempt_id != first.record.attempt_id
    late_lines = [
        e for e in log_entries(cut_off.log()) if e.get("attempt_id") == first.record.attempt_id
    ]
    assert [e["outcome"] for e in late_lines] == ["lease_lost"]
    # A ran its work while cut off (the loss is detected, logged and not recorded); B ran once.
    assert len(completed_work(fault_dir)) == 2


# --- clock skew -----------------------------------------------------------------------


class SkewedClock:
    """One instance's view of a shared true clock, off by a fixed amount."""

    def __init__(self, true_clock: FakeClock, offset: timedelta) -> None:
        self._true = true_clock
        self._offset = offset

    def __call__(self) -> datetime:
        return self._true() + self._offset


def _two_instances(offset_a: float, offset_b: float):
    true_clock = FakeClock()
    store = MemoryRunStore()

    def make(name: str, offset: float) -> App:
        def job(ctx: RunContext) -> None:
            return None

        clock = SkewedClock(true_clock, timedelta(seconds=offset))
        # Attempt ids must be unique across instances, as uuid4 ids are in production.
        app = App(
            app_settings(),
            {"nightly-report": job},
            lambda: store,
            clock,
            sequential_ids(name),
            renewals=DrivenRenewals(),
        )
        return app

    return true_clock, make("a", offset_a), make("b", offset_b)


def _live_lease_overlap(offset_a: float, offset_b: float, wait_s: float) -> bool:
    """A claims; while A's job runs, `wait_s` true seconds pass and B gets a duplicate.

    True if B claimed the run while A, by its own clock, still held a live lease.
    """
    true_clock, app_a, app_b = _two_instances(offset_a, offset_b)
    overlap = False

    def a_job(ctx: RunContext) -> None:
        nonlocal overlap
        true_clock.advance(seconds=wait_s)
        b = app_b.handle("POST", scheduler_headers(), b"")
        if b.outcome == "completed":
            overlap = overlap or ctx.lease_held()

    app_a.jobs = {"nightly-report": a_job}
    app_a.handle("POST", scheduler_headers(), b"")
    return overlap


@settings(max_examples=150, deadline=None)
@given(
    offset_a=st.floats(-1.0, 1.0),
    offset_b=st.floats(-1.0, 1.0),
    # Anywhere in the lease, and densely around its end where a takeover could slip in.
    wait_s=st.one_of(st.floats(0, LEASE_S + 10), st.floats(LEASE_S - 3, LEASE_S + 3)),
)
def test_skew_within_the_bound_never_gives_two_live_leases(
    offset_a: float, offset_b: float, wait_s: float
) -> None:
    """Any two clocks within +-1 s of true time differ by at most MAX_CLOCK_SKEW (2 s)."""
    assert not _live_lease_overlap(offset_a, offset_b, wait_s)


def test_skew_within_the_bound_on_a_grid_around_the_lease_end() -> None:
    """Every pair of offsets in +-1 s (quarter steps) and every wait in the 6 s around
    the lease end (quarter steps): the deterministic companion of the search above."""
    offsets = [step / 4 for step in range(-4, 5)]
    waits = [LEASE_S - 3 + step / 4 for step in range(25)]
    overlaps = [
        (a, b, w) for a in offsets for b in offsets for w in waits if _live_lease_overlap(a, b, w)
    ]
    assert overlaps == []


def test_skew_beyond_the_bound_can_give_two_live_leases() -> None:
    """The guarantee is stated for MAX_CLOCK_SKEW; 1 s beyond it, it no longer holds.

    This documents the assumption (hosts within 2 s) rather than a defect: B's clock
    runs 3 s ahead of A's, so half a second before A's lease ends B already sees it
    expired by more than the margin and takes over while A still holds it.
    """
    assert _live_lease_overlap(0.0, MAX_CLOCK_SKEW.total_seconds() + 1.0, LEASE_S - 0.5)
