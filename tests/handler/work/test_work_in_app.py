"""Checkpoints and outputs through the handler, on the emulator: costs, retries, takeovers."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from runledger.exceptions import TerminalJobError
from runledger.ledger.record import Status
from tests.handler.support import Takeover, default_run_key, deliver, make_app

JOB = "nightly-report"


def test_a_job_without_checkpoints_still_costs_two_rpcs(firestore_store, rpc_counter, clock):
    app = make_app(firestore_store, {JOB: lambda ctx: None}, clock)
    assert deliver(app).status == 200
    assert rpc_counter.total == 2


def test_a_stage_costs_one_lookup_and_one_fenced_commit(firestore_store, rpc_counter, clock):
    app = make_app(firestore_store, {JOB: lambda ctx: ctx.stage("extract", lambda: 1)}, clock)
    assert deliver(app).status == 200
    assert rpc_counter.calls["batch_get_documents"] == 1
    assert rpc_counter.calls["commit"] == 3  # claim, the stage, completion
    assert rpc_counter.total == 4


def test_a_declared_pipeline_is_looked_up_in_one_round_trip(firestore_store, rpc_counter, clock):
    def job(ctx) -> None:
        ctx.completed_stages(["a", "b", "c"])
        for name in "abc":
            ctx.stage(name, lambda n=name: n)

    app = make_app(firestore_store, {JOB: job}, clock)
    assert deliver(app).status == 200
    assert rpc_counter.calls["batch_get_documents"] == 1
    assert rpc_counter.total == 2 + 1 + 3


def test_a_retryable_failure_keeps_finished_stages_for_the_retry(firestore_store, clock):
    ran: list[str] = []
    fail_load = [True]

    def job(ctx) -> None:
        ctx.stage("extract", lambda: ran.append("extract"))
        ctx.stage("transform", lambda: ran.append("transform"))

        def load() -> None:
            ran.append("load")
            if fail_load[0]:
                raise ConnectionError("warehouse unreachable")

        ctx.stage("load", load)

    app = make_app(firestore_store, {JOB: job}, clock)
    first = deliver(app)
    assert (first.status, first.outcome) == (500, "failed_retryable")
    record = firestore_store.get(default_run_key(app)).record
    assert record.status is Status.RELEASED
    assert record.error == "ConnectionError: warehouse unreachable"
    fail_load[0] = False
    assert deliver(app).status == 200
    assert ran == ["extract", "transform", "load", "load"]


def test_a_terminal_failure_stores_its_reason_and_keeps_the_work(firestore_store, clock):
    def job(ctx) -> None:
        ctx.stage("extract", lambda: 1)
        raise TerminalJobError("input schema v3 is not supported")

    app = make_app(firestore_store, {JOB: job}, clock)
    assert deliver(app).outcome == "failed_terminal"
    record = firestore_store.get(default_run_key(app)).record
    assert (record.status, record.error) == (
        Status.FAILED,
        "TerminalJobError: input schema v3 is not supported",
    )
    assert deliver(app).status == 422
    assert firestore_store.get_items(default_run_key(app), ["checkpoint:extract"])


def test_concurrent_duplicates_produce_an_output_once(firestore_store, clock):
    produced: list[str] = []
    lock = threading.Lock()

    def job(ctx) -> None:
        def produce() -> str:
            with lock:
                produced.append(ctx.attempt_id)
            return "gs://reports/r.csv"

        ctx.output("report", produce)

    app = make_app(firestore_store, {JOB: job}, clock)
    with ThreadPoolExecutor(8) as pool:
        statuses = sorted(r.status for r in pool.map(lambda _: deliver(app), range(8)))
    assert len(produced) == 1
    assert statuses.count(200) >= 1
    assert set(statuses) <= {200, 409}
    assert deliver(app).status == 200  # a duplicate of the completed run
    assert len(produced) == 1


def test_a_stalled_attempts_checkpoint_is_refused_after_a_takeover(firestore_store, clock):
    takeover = Takeover(clock)

    def job(ctx) -> None:
        ctx.stage("extract", lambda: ctx.attempt_id)
        if takeover.hold(ctx):
            ctx.checkpoint("transform", "from the stalled attempt")
        else:
            ctx.checkpoint("transform", "from the newer attempt")

    app = make_app(firestore_store, {JOB: job}, clock)
    late = takeover.run_until_late_answer(app)
    assert (late.status, late.outcome) == (409, "lease_lost")
    assert not firestore_store.get_items(default_run_key(app), ["checkpoint:transform"])
    assert takeover.finish().status == 200
    items = firestore_store.get_items(
        default_run_key(app), ["checkpoint:extract", "checkpoint:transform"]
    )
    assert items["checkpoint:extract"].item.value == "attempt-1"  # resumed, not redone
    assert items["checkpoint:transform"].item.value == "from the newer attempt"
