"""Every branch of a delivery, end to end on the Firestore emulator: status, record, effect."""

from __future__ import annotations

import json
import os
import threading
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from google.cloud import firestore

from runledger.delivery.identify import identify_run
from runledger.exceptions import TerminalJobError
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.record import Status
from runledger.service.app import MAX_BODY_BYTES
from scheduler_dedup.localrun.emulator import free_port
from tests.handler.support import (
    LEASE,
    T0,
    DrivenRenewals,
    Takeover,
    default_run_key,
    deliver,
    make_app,
    scheduler_headers,
)

JOB = "nightly-report"


class Recorder:
    """A job that counts its executions, independently of the ledger."""

    def __init__(self, fail_with: BaseException | None = None) -> None:
        self.runs: list[str] = []
        self.fail_with = fail_with
        self._lock = threading.Lock()

    def __call__(self, ctx) -> None:
        with self._lock:
            self.runs.append(ctx.run_id)
        if self.fail_with is not None:
            raise self.fail_with


def stored(firestore_store, app):
    found = firestore_store.get(default_run_key(app))
    return None if found is None else found.record


def all_documents(firestore_db):
    return list(firestore_db.collection("scheduler_runs").stream())


def test_first_delivery_runs_the_work_and_records_completion_in_two_rpcs(
    firestore_store, rpc_counter, clock
):
    job = Recorder()
    app = make_app(firestore_store, {JOB: job}, clock)
    response = deliver(app)
    assert (response.status, response.outcome) == (200, "completed")
    assert rpc_counter.total == 2
    assert len(job.runs) == 1
    record = stored(firestore_store, app)
    assert record.status is Status.COMPLETED
    assert record.attempts == 1
    assert record.expire_at == record.schedule_time + app.settings.retention


def test_duplicate_of_a_completed_run_answers_200_without_work_in_two_rpcs(
    firestore_store, rpc_counter, clock
):
    job = Recorder()
    app = make_app(firestore_store, {JOB: job}, clock)
    deliver(app)
    rpc_counter.reset()
    response = deliver(app, scheduler_headers(schedule_time="2026-10-16T05:00:00-07:00"))
    assert (response.status, response.outcome) == (200, "duplicate_completed")
    assert rpc_counter.total == 2
    assert len(job.runs) == 1


def test_work_outlasting_a_third_of_the_lease_is_renewed_by_the_apps_scheduler(
    firestore_store, rpc_counter, clock
):
    renewals = DrivenRenewals()
    renewed: list[int] = []

    def long_job(ctx) -> None:
        clock.advance(seconds=LEASE.total_seconds() * 0.9)
        renewed.append(renewals.run_due())  # the renewal the app scheduled at the claim
        assert ctx.lease_held()

    app = make_app(firestore_store, {JOB: long_job}, clock, renewals)
    response = deliver(app)
    assert (response.status, response.outcome) == (200, "completed")
    assert renewed == [1]
    assert rpc_counter.total == 3  # claim, renewal, completion
    renewals.run_due()  # the next renewal, scheduled during the work, comes due
    assert rpc_counter.total == 3  # and writes nothing for a finished delivery
    assert stored(firestore_store, app).lease_expires == clock() + LEASE


def test_duplicate_while_the_first_attempt_runs_answers_409(firestore_store, clock):
    inside, release = threading.Event(), threading.Event()
    answers = []

    def slow(ctx) -> None:
        inside.set()
        release.wait(60)

    app = make_app(firestore_store, {JOB: slow}, clock)
    first = threading.Thread(target=lambda: answers.append(deliver(app)))
    first.start()
    assert inside.wait(60)
    duplicate = deliver(app)
    release.set()
    first.join(60)
    assert (duplicate.status, duplicate.outcome) == (409, "duplicate_in_progress")
    assert answers[0].status == 200


def test_concurrent_duplicates_execute_the_work_exactly_once(firestore_store, clock):
    job = Recorder()
    app = make_app(firestore_store, {JOB: job}, clock)
    headers = [
        scheduler_headers(schedule_time=stamp)
        for stamp in ("2026-10-16T12:00:00Z", "2026-10-16T05:00:00-07:00") * 8
    ]
    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = [r.status for r in pool.map(lambda h: deliver(app, h), headers)]
    assert len(job.runs) == 1
    assert all(status in (200, 409) for status in statuses)
    assert statuses.count(200) >= 1
    assert stored(firestore_store, app).status is Status.COMPLETED


def test_retryable_failure_releases_the_run_and_the_retry_runs_it_once_more(firestore_store, clock):
    job = Recorder(fail_with=TimeoutError("upstream timed out"))
    app = make_app(firestore_store, {JOB: job}, clock)
    failed = deliver(app)
    assert (failed.status, failed.outcome) == (500, "failed_retryable")
    record = stored(firestore_store, app)
    assert record.status is Status.RELEASED
    assert record.error == "TimeoutError: upstream timed out"
    job.fail_with = None
    retried = deliver(app)
    assert retried.status == 200
    assert len(job.runs) == 2
    record = stored(firestore_store, app)
    assert (record.status, record.attempts) == (Status.COMPLETED, 2)
    assert deliver(app).outcome == "duplicate_completed"
    assert len(job.runs) == 2


def test_terminal_failure_is_recorded_and_never_rerun(firestore_store, clock):
    job = Recorder(fail_with=TerminalJobError("customer account closed"))
    app = make_app(firestore_store, {JOB: job}, clock)
    response = deliver(app)
    assert (response.status, response.outcome) == (422, "failed_terminal")
    record = stored(firestore_store, app)
    assert record.status is Status.FAILED
    assert record.error == "TerminalJobError: customer account closed"
    clock.advance(hours=2)
    again = deliver(app)
    assert (again.status, again.outcome) == (422, "duplicate_failed")
    assert "customer account closed" in again.message
    assert len(job.runs) == 1


def test_crash_after_claim_is_reclaimed_once_the_lease_runs_out(firestore_store, clock):
    job = Recorder()
    app = make_app(firestore_store, {JOB: job}, clock)
    app.ledger.claim(identify_run(scheduler_headers(), app.settings, app.jobs, clock()))
    assert deliver(app).status == 409
    clock.advance(seconds=(app.settings.lease + MAX_CLOCK_SKEW).total_seconds())
    response = deliver(app)
    assert response.status == 200
    assert len(job.runs) == 1
    record = stored(firestore_store, app)
    assert (record.status, record.attempts) == (Status.COMPLETED, 2)


def test_attempt_that_lost_its_lease_cannot_overwrite_the_newer_attempt(firestore_store, clock):
    """The first attempt stalls past its lease; a retry takes over and is still running."""
    takeover = Takeover(clock)

    def job(ctx) -> None:
        takeover.hold(ctx)

    app = make_app(firestore_store, {JOB: job}, clock)
    late = takeover.run_until_late_answer(app)
    assert (late.status, late.outcome) == (409, "lease_lost")
    record = stored(firestore_store, app)
    assert (record.status, record.attempt_id) == (Status.IN_PROGRESS, "attempt-2")
    assert takeover.finish().status == 200
    assert stored(firestore_store, app).attempt_id == "attempt-2"


def test_job_sees_its_lease_lost_through_the_context(firestore_store, clock):
    seen = {}

    def job(ctx) -> None:
        seen["before"] = ctx.lease_held()
        clock.advance(seconds=app.settings.lease.total_seconds())
        seen["after"] = ctx.lease_held()
        ctx.ensure_lease()

    app = make_app(firestore_store, {JOB: job}, clock)
    response = deliver(app)
    assert seen == {"before": True, "after": False}
    assert (response.status, response.outcome) == (409, "lease_lost")


def test_context_carries_the_run_identity_and_body(firestore_store, clock):
    seen = []
    app = make_app(firestore_store, {JOB: seen.append}, clock)
    deliver(app, body=b'{"ledger": "eu"}')
    ctx = seen[0]
    assert ctx.run_id == default_run_key(app)
    assert (ctx.job_name, ctx.project, ctx.region, ctx.manual) == (
        JOB,
        "acme-prod",
        "europe-west1",
        False,
    )
    assert ctx.schedule_time.isoformat() == "2026-10-16T12:00:00+00:00"
    assert ctx.attempt_id == "attempt-1"
    assert ctx.body == b'{"ledger": "eu"}'


def test_forced_run_runs_under_its_own_key_and_the_real_run_still_happens(
    firestore_store, firestore_db, clock
):
    job = Recorder()
    app = make_app(firestore_store, {JOB: job}, clock)
    next_run = scheduler_headers(schedule_time="2026-10-16T13:00:00Z")
    assert deliver(app, next_run).status == 200
    assert deliver(app, next_run).outcome == "duplicate_completed"
    clock.advance(hours=1)
    assert deliver(app, next_run).outcome == "completed"
    assert len(job.runs) == 2
    manual_flags = sorted(doc.to_dict()["manual"] for doc in all_documents(firestore_db))
    assert manual_flags == [False, True]


@pytest.mark.parametrize(
    ("method", "headers", "body", "status"),
    [
        ("GET", None, b"", 405),
        ("POST", scheduler_headers(job="unknown-job"), b"", 404),
        ("POST", scheduler_headers(schedule_time="not-a-time"), b"", 400),
        ("POST", [], b"", 400),
        ("POST", None, b"x" * (MAX_BODY_BYTES + 1), 413),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(
    firestore_store, firestore_db, rpc_counter, clock, method, headers, body, status
):
    job = Recorder()
    app = make_app(firestore_store, {JOB: job}, clock)
    response = deliver(app, headers, method=method, body=body)
    assert response.status == status
    assert response.outcome == "rejected"
    assert rpc_counter.total == 0
    assert all_documents(firestore_db) == []
    assert job.runs == []


def test_firestore_unreachable_answers_503_and_runs_nothing(clock, monkeypatch):
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{free_port()}")
    store = FirestoreRunStore(firestore.Client(project="demo-down"), "scheduler_runs")
    job = Recorder()
    app = make_app(store, {JOB: job}, clock)
    response = deliver(app)
    assert (response.status, response.outcome) == (503, "store_unavailable")
    assert job.runs == []


def test_one_json_log_line_per_request(firestore_store, clock, capsys):
    app = make_app(firestore_store, {JOB: Recorder()}, clock)
    deliver(app)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 1
    entry = lines[0]
    assert entry["severity"] == "INFO"
    assert entry["outcome"] == "completed"
    assert entry["job"] == JOB
    assert entry["schedule_time"] == "2026-10-16T12:00:00+00:00"
    assert entry["attempt_id"] == "attempt-1"
    assert len(entry["run_key"]) == 64
    assert entry["duration_ms"] >= 0


# The Firestore RPCs the client calls as server streams; the rest it calls are unary.
_SERVER_STREAMING = frozenset({"BatchGetDocuments", "RunQuery", "RunAggregationQuery"})


class FirestoreGate:
    """A gRPC pass-through to the emulator that can refuse every call with a given status.

    The real Firestore client talks to it as to Firestore; refusing with
    PERMISSION_DENIED stands in for an IAM grant that has not applied yet, and
    FAILED_PRECONDITION with Firestore's own message for a Datastore-mode
    database, which the emulator cannot be.
    """

    def __init__(self, upstream: str) -> None:
        self.refuse: tuple[grpc.StatusCode, str] | None = None
        self.calls = 0
        self._channel = grpc.insecure_channel(upstream)
        self.server = grpc.server(futures.ThreadPoolExecutor(8))
        self.server.add_generic_rpc_handlers((self,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = details.method
        if method.rsplit("/", 1)[-1] in _SERVER_STREAMING:
            upstream_stream = self._channel.unary_stream(method)

            def stream(request: bytes, context: grpc.ServicerContext):
                self._gate(context)
                try:
                    yield from upstream_stream(request, metadata=self._metadata(context))
                except grpc.RpcError as exc:
                    context.abort(exc.code(), exc.details())

            return grpc.unary_stream_rpc_method_handler(stream)
        upstream_unary = self._channel.unary_unary(method)

        def unary(request: bytes, context: grpc.ServicerContext) -> bytes:
            self._gate(context)
            try:
                return upstream_unary(request, metadata=self._metadata(context))
            except grpc.RpcError as exc:
                context.abort(exc.code(), exc.details())

        return grpc.unary_unary_rpc_method_handler(unary)

    def _gate(self, context: grpc.ServicerContext) -> None:
        self.calls += 1
        if self.refuse is not None:
            context.abort(*self.refuse)

    @staticmethod
    def _metadata(context: grpc.ServicerContext) -> list[tuple[str, str]]:
        return [
            (key, value)
            for key, value in context.invocation_metadata()
            if not key.startswith(":") and key != "user-agent"
        ]


@pytest.fixture
def gate(firestore_db, monkeypatch):
    """A FirestoreRunStore whose client reaches the (emptied) emulator through a FirestoreGate."""
    fake = FirestoreGate(os.environ["FIRESTORE_EMULATOR_HOST"])
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{fake.port}")
    client = firestore.Client(project=firestore_db.project)
    yield fake, FirestoreRunStore(client, "scheduler_runs")
    fake.server.stop(None)


def test_firestore_permission_denied_is_retried_and_the_run_happens_once_granted(
    gate, firestore_store, clock, capsys
):
    fake, gated_store = gate
    fake.refuse = (grpc.StatusCode.PERMISSION_DENIED, "Missing or insufficient permissions.")
    job = Recorder()
    app = make_app(gated_store, {JOB: job}, clock)
    denied = deliver(app)
    assert (denied.status, denied.outcome) == (503, "store_permission_denied")
    assert "IAM grants can take minutes" in denied.message
    assert fake.calls > 0
    assert job.runs == []
    assert stored(firestore_store, app) is None
    fake.refuse = None  # the grant has applied
    assert deliver(app).outcome == "completed"
    assert deliver(app).outcome == "duplicate_completed"
    assert len(job.runs) == 1
    assert stored(firestore_store, app).status is Status.COMPLETED
    log = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [entry["outcome"] for entry in log] == [
        "store_permission_denied",
        "completed",
        "duplicate_completed",
    ]
    assert log[0]["severity"] == "ERROR"


def test_a_datastore_mode_database_is_named_as_the_cause_and_runs_nothing(gate, clock, capsys):
    fake, gated_store = gate
    fake.refuse = (
        grpc.StatusCode.FAILED_PRECONDITION,
        "The Cloud Firestore API is not available for Firestore in Datastore Mode "
        "database projects/acme-prod/databases/(default).",
    )
    job = Recorder()
    app = make_app(gated_store, {JOB: job}, clock)
    for _ in range(2):
        response = deliver(app)
        assert (response.status, response.outcome) == (500, "store_unusable")
        assert "Datastore mode" in response.message
        assert "Firestore Native mode" in response.message
    assert job.runs == []
    entries = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(entries) == 2
    assert {(e["severity"], e["outcome"]) for e in entries} == {("ERROR", "store_unusable")}


def test_other_failed_preconditions_stay_an_outage(gate, clock):
    fake, gated_store = gate
    fake.refuse = (grpc.StatusCode.FAILED_PRECONDITION, "The query requires an index.")
    app = make_app(gated_store, {JOB: Recorder()}, clock)
    response = deliver(app)
    assert (response.status, response.outcome) == (503, "store_unavailable")


def unstamped_forced_run() -> list[tuple[str, str]]:
    """Cloud Scheduler's "Force run" may omit X-CloudScheduler-ScheduleTime altogether."""
    return [h for h in scheduler_headers() if "ScheduleTime" not in h[0]]


def test_forced_run_without_schedule_time_runs_once_for_simultaneous_copies(
    firestore_store, firestore_db, clock, capsys
):
    job = Recorder()
    app = make_app(firestore_store, {JOB: job}, clock)
    with ThreadPoolExecutor(8) as pool:
        copies = pool.map(lambda _: deliver(app, unstamped_forced_run()), range(8))
        statuses = [response.status for response in copies]
    assert len(job.runs) == 1
    assert 200 in statuses and set(statuses) <= {200, 409}
    (document,) = all_documents(firestore_db)
    assert document.to_dict()["manual"] is True
    assert document.to_dict()["status"] == "completed"
    entries = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    window = int(LEASE.total_seconds())
    assert all(e["unstamped_forced_run_window_s"] == window for e in entries)


def test_forced_run_without_schedule_time_repeats_are_recognised_for_one_window(
    firestore_store, firestore_db, clock
):
    """A repeat within one lease of the first copy (across a window edge) is the same run;
    one arriving two windows later is a new forced run."""
    job = Recorder()
    app = make_app(firestore_store, {JOB: job}, clock)
    clock.advance(seconds=(T0 + LEASE - clock()).total_seconds() - 1)  # 1 s before a window edge
    assert deliver(app, unstamped_forced_run()).outcome == "completed"
    clock.advance(seconds=2)
    assert deliver(app, unstamped_forced_run()).outcome == "duplicate_completed"
    clock.advance(seconds=LEASE.total_seconds() - 3)  # just under one lease after the first
    assert deliver(app, unstamped_forced_run()).outcome == "duplicate_completed"
    assert len(job.runs) == 1
    clock.advance(seconds=LEASE.total_seconds())
    assert deliver(app, unstamped_forced_run()).outcome == "completed"
    assert len(job.runs) == 2
    assert sorted(doc.to_dict()["manual"] for doc in all_documents(firestore_db)) == [True, True]


def test_forced_run_without_schedule_time_retried_after_a_failure_resumes_its_run(
    firestore_store, clock
):
    job = Recorder(fail_with=RuntimeError("downstream not ready"))
    app = make_app(firestore_store, {JOB: job}, clock)
    clock.advance(seconds=(T0 + LEASE - clock()).total_seconds() - 1)
    assert deliver(app, unstamped_forced_run()).outcome == "failed_retryable"
    job.fail_with = None
    clock.advance(seconds=30)  # Cloud Scheduler's backoff carries the retry past the window edge
    assert deliver(app, unstamped_forced_run()).outcome == "completed"
    assert len(job.runs) == 2
    assert len(set(job.runs)) == 1, "the retry ran under the first copy's run key"


def test_forced_run_without_schedule_time_is_refused_when_forced_runs_are(
    firestore_store, firestore_db, rpc_counter, clock
):
    job = Recorder()
    app = make_app(firestore_store, {JOB: job}, clock, DEDUP_MANUAL_RUNS="reject")
    response = deliver(app, unstamped_forced_run())
    assert (response.status, response.outcome) == (403, "rejected")
    assert rpc_counter.total == 0
    assert all_documents(firestore_db) == []
    assert job.runs == []
