"""Firestore unreachable before the claim, during the work and at completion.

Three ways of making Firestore go away, each for what it can show:

* real stop: the test's OWN emulator process is stopped and later restarted on
  the same port (never the shared session emulator). The emulator keeps data in
  memory only, so a restart wipes the ledger; these tests therefore check what
  the handler answers during the outage, and exactly-once only for the outage
  before the claim, where there is nothing to lose.
* network cut: a loopback TCP relay between the handler and the emulator resets
  every connection and refuses new ones; the emulator and its records live on,
  so the run can be followed through the outage to its single completion.
* in-process store wrapper: the store fails at one exact primitive call (before
  it applies, or after it applied with the answer lost), on the memory store and
  on Firestore, which a network cut cannot aim at.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.record import Status
from runledger.ledger.store import RunStore
from scheduler_dedup.localrun.emulator import FirestoreEmulator, start_emulator
from tests.handler.support import DrivenRenewals, FakeClock, make_app, scheduler_headers
from tests.reliability.netfault import TcpLink
from tests.reliability.relsupport import (
    Fault,
    FaultyStore,
    Reply,
    Servers,
    completed_work,
    deliver,
    effects,
    probe_run,
    run_headers,
    schedule_time_now,
    server_env,
    wait_for,
)

COLLECTION = "rel_outage"


def _until_2xx(url: str, headers: list, limit_s: float) -> tuple[list[Reply], Reply]:
    """Redeliver (as Scheduler's retry policy would) until a 2xx; return the refusals too."""
    refused: list[Reply] = []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        reply = deliver(url, headers)
        if 200 <= reply.status < 300:
            return refused, reply
        refused.append(reply)
        time.sleep(0.3)
    raise AssertionError(f"no 2xx within {limit_s} s: {[(r.status, r.outcome) for r in refused]}")


@pytest.fixture
def own_emulator() -> Iterator[FirestoreEmulator]:
    """A private emulator this test may stop; the shared session one is never touched."""
    emulator = start_emulator()
    holder = [emulator]
    try:
        yield emulator
    finally:
        holder[-1].stop()
        emulator.stop()


def _port(emulator: FirestoreEmulator) -> int:
    return int(emulator.host.rsplit(":", 1)[1])


@pytest.mark.firestore
@pytest.mark.timeout(280)
def test_emulator_stopped_before_the_claim_then_back_runs_the_work_once(
    own_emulator: FirestoreEmulator, fault_dir: Path, servers: Servers
) -> None:
    server = servers.start(server_env(own_emulator, fault_dir, COLLECTION))
    headers = run_headers("probe", schedule_time_now())
    own_emulator.stop()

    down = deliver(server.url, headers)
    assert (down.status, down.outcome) == (503, "store_unavailable")
    assert "before claim" in down.body["message"]
    assert completed_work(fault_dir) == []

    back = start_emulator(port=_port(own_emulator))
    try:
        refused, done = _until_2xx(server.url, headers, limit_s=120)
        # The client may need a few rounds to reconnect; it answers 503 meanwhile. A claim
        # that landed while its answer timed out is given up by its holder, and a delivery
        # inside the clock-skew margin after that meets it in progress: 409, still retryable.
        assert all(
            r.status == 503 or (r.status, r.outcome) == (409, "duplicate_in_progress")
            for r in refused
        ), [(r.status, r.outcome) for r in refused]
        assert done.outcome == "completed"
        assert len(completed_work(fault_dir)) == 1
        again = deliver(server.url, headers)
        assert (again.status, again.outcome) == (200, "duplicate_completed")
        assert len(completed_work(fault_dir)) == 1
    finally:
        back.stop()


@pytest.mark.firestore
@pytest.mark.timeout(280)
def test_emulator_stopped_during_the_work_answers_5xx_never_2xx(
    own_emulator: FirestoreEmulator, fault_dir: Path, servers: Servers
) -> None:
    """The work finished but its completion could not be written: 503, so Scheduler retries."""
    env = server_env(own_emulator, fault_dir, COLLECTION)
    server = servers.start(env | {"REL_PAUSE_AT": "during"})
    headers = run_headers("crash-probe", schedule_time_now())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(deliver, server.url, headers, timeout_s=120)
        wait_for((fault_dir / "reached-during").exists, 60, "the job to start its work")
        own_emulator.stop()
        (fault_dir / "release-during").touch()
        reply = pending.result(timeout=120)
    assert (reply.status, reply.outcome) == (503, "store_unavailable")
    assert "could not record the outcome" in reply.body["message"]
    assert len(completed_work(fault_dir)) == 1
    assert server.process.poll() is None, "the handler process survived the outage"


@pytest.mark.firestore
@pytest.mark.timeout(280)
def test_network_cut_during_the_work_then_restored_completes_exactly_once(
    clean_emulator: FirestoreEmulator, fault_dir: Path, servers: Servers
) -> None:
    """Renewals fail while the link is down; nobody else could claim; completion lands."""
    headers, key, store = probe_run(clean_emulator, COLLECTION)
    with TcpLink.in_front_of(clean_emulator.host) as link:
        env = server_env(
            {**clean_emulator.env(), "FIRESTORE_EMULATOR_HOST": link.host}, fault_dir, COLLECTION
        )
        server = servers.start(env | {"REL_PAUSE_AT": "during"})
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            pending = pool.submit(deliver, server.url, headers, timeout_s=120)
            wait_for((fault_dir / "reached-during").exists, 60, "the job to start its work")
            link.cut()
            duplicate = deliver(server.url, headers)
            # A duplicate during the outage cannot read the ledger: 5xx, and no work.
            assert (duplicate.status, duplicate.outcome) == (503, "store_unavailable")
            link.restore()
            (fault_dir / "release-during").touch()
            reply = pending.result(timeout=120)
        assert (reply.status, reply.outcome) == (200, "completed")
        again = deliver(server.url, headers)
        assert (again.status, again.outcome) == (200, "duplicate_completed")
    record = store.get(key)
    assert record is not None and record.record.status is Status.COMPLETED
    assert record.record.attempts == 1
    assert [kind for kind, _, _ in effects(fault_dir)] == ["begin", "end"]


@pytest.mark.firestore
@pytest.mark.timeout(280)
def test_network_cut_at_completion_gives_5xx_then_the_retry_completes_the_run(
    clean_emulator: FirestoreEmulator, fault_dir: Path, servers: Servers
) -> None:
    """The outcome could not be recorded: 503, the record survives, the retry finishes it.

    The work itself runs twice here (same run_id both times): the first attempt
    finished it but could not say so. That window is inherent to at-least-once
    delivery; the ledger still records one completion and never answered 2xx for
    work it could not record.
    """
    headers, key, store = probe_run(clean_emulator, COLLECTION)
    with TcpLink.in_front_of(clean_emulator.host) as link:
        env = server_env(
            {**clean_emulator.env(), "FIRESTORE_EMULATOR_HOST": link.host}, fault_dir, COLLECTION
        )
        server = servers.start(env | {"REL_PAUSE_AT": "after_work"})
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(deliver, server.url, headers, timeout_s=120)
            wait_for((fault_dir / "reached-after_work").exists, 60, "the work to finish")
            link.cut()
            (fault_dir / "release-after_work").touch()
            reply = pending.result(timeout=120)
        assert (reply.status, reply.outcome) == (503, "store_unavailable")
        left = store.get(key)
        assert left is not None and left.record.status is Status.IN_PROGRESS
        link.restore()
        retry_server = servers.start(env)
        refused, done = _until_2xx(retry_server.url, headers, limit_s=120)
        assert done.outcome == "completed"
        assert all(r.status in (409, 503) for r in refused)
    record = store.get(key)
    assert record is not None and record.record.status is Status.COMPLETED
    assert record.record.attempts == 2
    ends = completed_work(fault_dir)
    assert len(ends) == 2 and {run for run, _ in ends} == {key}


def _counting_app(store: RunStore) -> tuple:
    clock = FakeClock()
    ran: list[str] = []
    app = make_app(store, {"nightly-report": lambda ctx: ran.append(ctx.attempt_id)}, clock)
    return app, clock, ran


@pytest.mark.timeout(60)
def test_store_unavailable_at_the_claim_writes_nothing_and_runs_nothing(base_store: RunStore):
    store = FaultyStore(base_store)
    app, _, ran = _counting_app(store)
    store.arm(Fault("create", 1, "unavailable"))
    down = app.handle("POST", scheduler_headers(), b"")
    assert (down.status, down.outcome) == (503, "store_unavailable")
    assert ran == []
    store.arm()
    done = app.handle("POST", scheduler_headers(), b"")
    assert (done.status, done.outcome) == (200, "completed")
    assert len(ran) == 1


@pytest.mark.timeout(60)
def test_store_unavailable_at_completion_is_5xx_and_the_run_completes_once_later(
    base_store: RunStore,
):
    store = FaultyStore(base_store)
    app, clock, ran = _counting_app(store)
    store.arm(Fault("update", 1, "unavailable"))
    down = app.handle("POST", scheduler_headers(), b"")
    assert (down.status, down.outcome) == (503, "store_unavailable")
    store.arm()
    assert app.handle("POST", scheduler_headers(), b"").status == 409
    clock.advance(seconds=300 + MAX_CLOCK_SKEW.total_seconds())
    done = app.handle("POST", scheduler_headers(), b"")
    assert (done.status, done.outcome) == (200, "completed")
    assert len(ran) == 2
    assert app.handle("POST", scheduler_headers(), b"").outcome == "duplicate_completed"
    assert len(ran) == 2


@pytest.mark.timeout(60)
def test_completion_that_landed_with_its_answer_lost_is_not_run_again(base_store: RunStore):
    store = FaultyStore(base_store)
    app, clock, ran = _counting_app(store)
    store.arm(Fault("update", 1, "lost_answer"))
    unsure = app.handle("POST", scheduler_headers(), b"")
    assert unsure.status == 503, "the handler cannot know the write landed: not 2xx"
    store.arm()
    clock.advance(seconds=400)
    again = app.handle("POST", scheduler_headers(), b"")
    assert (again.status, again.outcome) == (200, "duplicate_completed")
    assert len(ran) == 1


@pytest.mark.timeout(60)
def test_claim_that_landed_with_its_answer_lost_blocks_the_run_only_until_its_lease(
    base_store: RunStore,
):
    store = FaultyStore(base_store)
    app, clock, ran = _counting_app(store)
    store.arm(Fault("create", 1, "lost_answer"))
    assert app.handle("POST", scheduler_headers(), b"").status == 503
    store.arm()
    assert app.handle("POST", scheduler_headers(), b"").outcome == "duplicate_in_progress"
    clock.advance(seconds=300 + MAX_CLOCK_SKEW.total_seconds())
    done = app.handle("POST", scheduler_headers(), b"")
    assert (done.status, done.outcome) == (200, "completed")
    assert len(ran) == 1


@pytest.mark.timeout(60)
def test_renewal_that_landed_with_its_answer_lost_does_not_cost_the_lease(base_store: RunStore):
    """A renewal applied server-side whose answer was lost (a timed-out commit, then a
    retry refused by its own precondition) must not make the holder think it lost the
    run: nobody else ever claimed it, so the completion must land and the work run once.
    """
    store = FaultyStore(base_store)
    clock = FakeClock()
    renewals = DrivenRenewals()
    ran: list[str] = []

    def job(ctx) -> None:
        clock.advance(seconds=100)
        assert renewals.run_due() == 1  # the background renewal, due every lease/3
        ran.append(ctx.attempt_id)
        ctx.ensure_lease()

    app = make_app(store, {"nightly-report": job}, clock, renewals)
    store.arm(Fault("update", 1, "lost_answer"))  # update #1 is the renewal
    reply = app.handle("POST", scheduler_headers(), b"")
    assert (reply.status, reply.outcome) == (200, "completed")
    store.arm()
    clock.advance(seconds=400)
    assert app.handle("POST", scheduler_headers(), b"").outcome == "duplicate_completed"
    assert len(ran) == 1
