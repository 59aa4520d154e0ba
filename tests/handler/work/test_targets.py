"""Proxy targets against local stand-ins for the Workflows and Cloud Run APIs.

The official client libraries talk to a local server: Cloud Run's over its
REST transport (plain HTTP, `api_endpoint` in client options, anonymous
credentials) and Workflows Executions over gRPC (its client has no REST
transport). Each server checks the request shape and counts calls per token.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import run_v2
from google.cloud.workflows import executions_v1
from google.cloud.workflows.executions_v1.services.executions.transports import (
    ExecutionsGrpcTransport,
)

from runledger.ledger.record import Status
from runledger.sdk.cloud_run_task import TaskIdentity
from runledger.targets import (
    CLOUD_RUN_OUTPUT,
    WORKFLOW_OUTPUT,
    cloud_run_job_target,
    workflow_target,
)
from tests.handler.support import default_run_key, make_app, scheduler_headers

WORKFLOW = "projects/acme-prod/locations/europe-west1/workflows/nightly-etl"
RUN_JOB = "projects/acme-prod/locations/europe-west1/jobs/reindex"
JOB = "nightly-report"


def is_run_key(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and int(value, 16) >= 0


class FakeWorkflows:
    """Executions.CreateExecution over gRPC: checks the token, counts calls per token."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.arguments: list[dict] = []
        self.fail_with: grpc.StatusCode | None = None
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        handler = grpc.method_handlers_generic_handler(
            "google.cloud.workflows.executions.v1.Executions",
            {
                "CreateExecution": grpc.unary_unary_rpc_method_handler(
                    self._create,
                    request_deserializer=executions_v1.CreateExecutionRequest.deserialize,
                    response_serializer=executions_v1.Execution.serialize,
                )
            },
        )
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _create(self, request, context):
        if self.fail_with is not None:
            context.abort(self.fail_with, "injected failure")
        if request.parent != WORKFLOW:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"parent {request.parent}")
        argument = json.loads(request.execution.argument)
        if not is_run_key(argument.get("idempotency_token")):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no idempotency token")
        with self._lock:
            self.calls[argument["idempotency_token"]] += 1
            self.arguments.append(argument)
            number = sum(self.calls.values())
        return executions_v1.Execution(name=f"{WORKFLOW}/executions/exec-{number}")

    def client(self) -> executions_v1.ExecutionsClient:
        channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        return executions_v1.ExecutionsClient(transport=ExecutionsGrpcTransport(channel=channel))


class FakeCloudRun:
    """POST /v2/{job}:run over HTTP/JSON: checks the env override, counts calls per token."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.bodies: list[dict] = []
        self.fail_status: int | None = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, answer = fake.answer(self.path.split("?")[0], body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, path: str, body: dict) -> tuple[int, dict]:
        if self.fail_status is not None:
            status = {403: "PERMISSION_DENIED", 503: "UNAVAILABLE"}[self.fail_status]
            error = {"code": self.fail_status, "message": "injected", "status": status}
            return self.fail_status, {"error": error}
        if path != f"/v2/{RUN_JOB}:run":
            return 404, {"error": {"code": 404, "message": f"no job at {path}"}}
        overrides = body.get("overrides", {}).get("containerOverrides", [])
        env = {e["name"]: e.get("value") for o in overrides for e in o.get("env", [])}
        if len(overrides) != 1 or not is_run_key(env.get("IDEMPOTENCY_TOKEN")):
            return 400, {"error": {"code": 400, "message": "no idempotency token"}}
        self.calls[env["IDEMPOTENCY_TOKEN"]] += 1
        self.bodies.append(body)
        number = sum(self.calls.values())
        return 200, {
            "name": f"projects/acme-prod/locations/europe-west1/operations/op-{number}",
            "metadata": {
                "@type": "type.googleapis.com/google.cloud.run.v2.Execution",
                "name": f"{RUN_JOB}/executions/reindex-{number}",
            },
        }

    def client(self) -> run_v2.JobsClient:
        return run_v2.JobsClient(
            transport="rest",
            credentials=AnonymousCredentials(),
            client_options=ClientOptions(
                api_endpoint=f"http://127.0.0.1:{self.server.server_port}"
            ),
        )


@pytest.fixture
def workflows():
    fake = FakeWorkflows()
    yield fake
    fake.server.stop(None)


@pytest.fixture
def cloud_run():
    fake = FakeCloudRun()
    yield fake
    fake.server.shutdown()


def deliver(app, schedule_time: str = "2026-10-16T12:00:00Z"):
    return app.handle("POST", scheduler_headers(schedule_time=schedule_time), b"")


def deliver_duplicates(app) -> list[int]:
    """Eight concurrent copies of one delivery, then three more after they settle."""
    with ThreadPoolExecutor(8) as pool:
        statuses = [r.status for r in pool.map(lambda _: deliver(app), range(8))]
    return statuses + [deliver(app).status for _ in range(3)]


def test_workflow_target_starts_one_execution_per_run(firestore_store, clock, workflows):
    target = workflow_target(
        WORKFLOW, argument={"dataset": "sales"}, client_factory=workflows.client
    )
    app = make_app(firestore_store, {JOB: target}, clock)
    statuses = deliver_duplicates(app)
    key = default_run_key(app)
    assert workflows.calls == {key: 1}
    assert 200 in statuses
    assert set(statuses) <= {200, 409}
    assert workflows.arguments == [
        {
            "dataset": "sales",
            "idempotency_token": key,
            "scheduler_job": JOB,
            "schedule_time": "2026-10-16T12:00:00+00:00",
            "manual": False,
        }
    ]
    output = firestore_store.get_items(key, [f"output:{WORKFLOW_OUTPUT}"])[
        f"output:{WORKFLOW_OUTPUT}"
    ]
    assert output.item.value == {"execution": f"{WORKFLOW}/executions/exec-1", "workflow": WORKFLOW}


def test_cloud_run_job_target_runs_the_job_once_per_run(firestore_store, clock, cloud_run):
    target = cloud_run_job_target(RUN_JOB, client_factory=cloud_run.client)
    app = make_app(firestore_store, {JOB: target}, clock)
    statuses = deliver_duplicates(app)
    key = default_run_key(app)
    assert cloud_run.calls == {key: 1}
    assert 200 in statuses
    env = cloud_run.bodies[0]["overrides"]["containerOverrides"][0]["env"]
    assert {e["name"]: e["value"] for e in env} == {
        "IDEMPOTENCY_TOKEN": key,
        "SCHEDULE_TIME": "2026-10-16T12:00:00+00:00",
    }
    output = firestore_store.get_items(key, [f"output:{CLOUD_RUN_OUTPUT}"])[
        f"output:{CLOUD_RUN_OUTPUT}"
    ]
    assert output.item.value == {
        "operation": "projects/acme-prod/locations/europe-west1/operations/op-1",
        "execution": f"{RUN_JOB}/executions/reindex-1",
        "job": RUN_JOB,
    }


def test_each_run_gets_its_own_call_and_token(firestore_store, clock, cloud_run):
    app = make_app(
        firestore_store,
        {JOB: cloud_run_job_target(RUN_JOB, client_factory=cloud_run.client)},
        clock,
    )
    assert deliver(app, "2026-10-16T12:00:00Z").status == 200
    assert deliver(app, "2026-10-16T11:00:00Z").status == 200
    assert deliver(app, "2026-10-16T12:00:00Z").status == 200
    assert sorted(cloud_run.calls.values()) == [1, 1]


def test_a_retry_after_the_call_was_recorded_does_not_call_again(firestore_store, clock, workflows):
    """The attempt fails after starting the execution; the retry finds the stored name."""
    target = workflow_target(WORKFLOW, client_factory=workflows.client)
    fail_after = [True]

    def job(ctx):
        result = target(ctx)
        if fail_after[0]:
            raise ConnectionError("lost the connection after starting the workflow")
        return result

    app = make_app(firestore_store, {JOB: job}, clock)
    assert deliver(app).outcome == "failed_retryable"
    fail_after[0] = False
    assert deliver(app).status == 200
    assert workflows.calls == {default_run_key(app): 1}


def test_a_permission_refusal_releases_the_workflow_run_until_the_grant_applies(
    firestore_store, clock, workflows
):
    """gRPC PERMISSION_DENIED (a grant not yet applied) is retried, then the run starts once."""
    workflows.fail_with = grpc.StatusCode.PERMISSION_DENIED
    app = make_app(
        firestore_store, {JOB: workflow_target(WORKFLOW, client_factory=workflows.client)}, clock
    )
    denied = deliver(app)
    assert (denied.status, denied.outcome) == (500, "failed_retryable")
    record = firestore_store.get(default_run_key(app)).record
    assert record.status is Status.RELEASED
    assert "PermissionDenied" in record.error
    assert workflows.calls == {}
    workflows.fail_with = None  # the grant has applied
    assert deliver(app).outcome == "completed"
    assert deliver(app).outcome == "duplicate_completed"
    assert workflows.calls == {default_run_key(app): 1}


def test_a_permission_refusal_releases_the_cloud_run_job_run_until_the_grant_applies(
    firestore_store, clock, cloud_run
):
    """HTTP 403 PERMISSION_DENIED over REST is retried too, then the job runs once."""
    cloud_run.fail_status = 403
    app = make_app(
        firestore_store,
        {JOB: cloud_run_job_target(RUN_JOB, client_factory=cloud_run.client)},
        clock,
    )
    denied = deliver(app)
    assert (denied.status, denied.outcome) == (500, "failed_retryable")
    record = firestore_store.get(default_run_key(app)).record
    assert record.status is Status.RELEASED
    assert "Forbidden" in record.error  # google.api_core's class for an HTTP 403
    cloud_run.fail_status = None
    assert deliver(app).outcome == "completed"
    assert deliver(app).outcome == "duplicate_completed"
    assert cloud_run.calls == {default_run_key(app): 1}


@pytest.mark.parametrize("code", [grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT])
def test_a_missing_or_misconfigured_target_fails_the_run_for_good(
    firestore_store, clock, workflows, code
):
    workflows.fail_with = code
    app = make_app(
        firestore_store, {JOB: workflow_target(WORKFLOW, client_factory=workflows.client)}, clock
    )
    assert deliver(app).outcome == "failed_terminal"
    record = firestore_store.get(default_run_key(app)).record
    assert record.status is Status.FAILED
    assert deliver(app).status == 422
    assert workflows.calls == {}


def test_an_unavailable_api_releases_the_run_for_a_retry(firestore_store, clock, cloud_run):
    cloud_run.fail_status = 503
    app = make_app(
        firestore_store,
        {JOB: cloud_run_job_target(RUN_JOB, client_factory=cloud_run.client)},
        clock,
    )
    assert deliver(app).outcome == "failed_retryable"
    assert "ServiceUnavailable" in firestore_store.get(default_run_key(app)).record.error
    cloud_run.fail_status = None
    assert deliver(app).status == 200
    assert cloud_run.calls == {default_run_key(app): 1}


@pytest.mark.parametrize(
    "make",
    [
        lambda: workflow_target("nightly-etl"),
        lambda: workflow_target(WORKFLOW, argument={"x": object()}),
        lambda: cloud_run_job_target("projects/p/jobs/j"),
        lambda: cloud_run_job_target(RUN_JOB, token_env="1BAD"),
    ],
)
def test_bad_target_config_fails_at_registration(make):
    with pytest.raises((ValueError, TypeError)):
        make()


def test_task_identity_inside_the_cloud_run_job():
    env = {
        "IDEMPOTENCY_TOKEN": "ab" * 32,
        "CLOUD_RUN_TASK_INDEX": "3",
        "CLOUD_RUN_TASK_COUNT": "4",
        "CLOUD_RUN_TASK_ATTEMPT": "2",
        "CLOUD_RUN_EXECUTION": "reindex-xyz",
    }
    task = TaskIdentity.from_env(env)
    assert (task.index, task.count, task.attempt, task.scheduled) == (3, 4, 2, True)
    assert task.key("part-0007.csv") == f"{'ab' * 32}/task-3/part-0007.csv"
    assert [n for n in range(10) if task.owns(n)] == [3, 7]
    by_hand = TaskIdentity.from_env({"CLOUD_RUN_EXECUTION": "reindex-xyz"})
    assert (by_hand.token, by_hand.index, by_hand.scheduled) == ("reindex-xyz", 0, False)
    with pytest.raises(ValueError):
        TaskIdentity.from_env({})
    with pytest.raises(ValueError):
        task.key("../escape")
