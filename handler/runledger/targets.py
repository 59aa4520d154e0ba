"""Ready-made jobs that start a Workflows execution or a Cloud Run job once per run.

Cloud Scheduler pointed straight at `*.googleapis.com` starts a new execution
on every retry of a run. Registered in JOBS instead, these targets run behind
the ledger: each run's claim calls the API once, passes the run key as the
idempotency token, and stores the execution's name as a once-only output, so a
later attempt of the same run (after a crash, a timeout or a lost answer from
Firestore) finds the name instead of starting a second execution.

The guarantee: one call per run, except when an attempt dies after the API
accepted the call and before the name was stored (or the API's answer was
lost). Neither API deduplicates on the token by itself, so a target that must
never run twice checks the token on its side (the token is in the workflow's
argument and in the job's environment).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from google.api_core import exceptions as gexc

from runledger.exceptions import TerminalJobError
from runledger.sdk.cloud_run_task import TOKEN_ENV
from runledger.sdk.context import RunContext
from runledger.sdk.registry import JobFn

if TYPE_CHECKING:
    from google.cloud.run_v2 import JobsClient
    from google.cloud.workflows.executions_v1 import ExecutionsClient

TOKEN_FIELD = "idempotency_token"
SCHEDULE_TIME_ENV = "SCHEDULE_TIME"
WORKFLOW_OUTPUT = "workflow_execution"
CLOUD_RUN_OUTPUT = "cloud_run_execution"
# Well inside the handler's lease; a slower answer is retried as a new attempt.
CALL_TIMEOUT_S = 30.0
# Workflows accepts an execution argument of at most 32 KiB.
MAX_ARGUMENT_BYTES = 32 * 1024

_WORKFLOW = re.compile(r"projects/[^/]+/locations/[^/]+/workflows/[^/]+")
_RUN_JOB = re.compile(r"projects/[^/]+/locations/[^/]+/jobs/[^/]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A retry cannot fix these: the target is missing or misconfigured. A refusal
# (PermissionDenied, gRPC 7; over REST google.api_core raises its base class
# Forbidden, HTTP 403) is not among them: grants made by the same deploy take
# minutes to apply, so the run is released and Cloud Scheduler's retry runs it.
_TERMINAL = (
    gexc.InvalidArgument,
    gexc.NotFound,
    gexc.FailedPrecondition,
)

C = TypeVar("C")


class _LazyClient(Generic[C]):
    """One API client per target, made on first use, so start-up needs no credentials."""

    def __init__(self, factory: Callable[[], C]) -> None:
        self._factory = factory
        self._client: C | None = None
        self._lock = threading.Lock()

    def get(self) -> C:
        with self._lock:
            if self._client is None:
                self._client = self._factory()
            return self._client


@contextmanager
def _classified(what: str) -> Iterator[None]:
    """Configuration errors end the run; anything else, permission refusals included, is retried."""
    try:
        yield
    except _TERMINAL as exc:
        raise TerminalJobError(f"{what}: {type(exc).__name__}: {exc.message}") from exc


def _default_executions_client() -> ExecutionsClient:
    from google.cloud.workflows.executions_v1 import ExecutionsClient

    return ExecutionsClient()


def _default_jobs_client() -> JobsClient:
    from google.cloud.run_v2 import JobsClient

    return JobsClient()


def workflow_target(
    workflow: str,
    *,
    argument: Mapping[str, Any] | None = None,
    token_field: str = TOKEN_FIELD,
    client_factory: Callable[[], ExecutionsClient] | None = None,
    timeout_s: float = CALL_TIMEOUT_S,
) -> JobFn:
    """A job that starts one execution of `workflow` per run.

    `workflow` is `projects/P/locations/L/workflows/W`. The execution's argument
    is `argument` plus `token_field` (the run key), `scheduler_job`,
    `schedule_time` and `manual`; the workflow reads the token from there.
    """
    if not _WORKFLOW.fullmatch(workflow):
        raise ValueError(f"{workflow!r} is not projects/P/locations/L/workflows/W")
    static = dict(argument or {})
    json.dumps(static)  # fail at start-up, not on the first run, if it is not JSON
    client = _LazyClient(client_factory or _default_executions_client)

    def start(ctx: RunContext) -> dict[str, str]:
        from google.cloud.workflows.executions_v1 import Execution

        payload = static | {
            token_field: ctx.run_id,
            "scheduler_job": ctx.job_name,
            "schedule_time": ctx.schedule_time.isoformat(),
            "manual": ctx.manual,
        }
        encoded = json.dumps(payload, sort_keys=True)
        if len(encoded.encode()) > MAX_ARGUMENT_BYTES:
            raise TerminalJobError(f"workflow argument exceeds {MAX_ARGUMENT_BYTES} bytes")
        ctx.ensure_lease()
        with _classified(f"starting an execution of {workflow}"):
            created = client.get().create_execution(
                parent=workflow,
                execution=Execution(argument=encoded),
                # A library retry after a lost answer would start a second
                # execution; the Scheduler's retry, behind the ledger, is enough.
                retry=None,
                timeout=timeout_s,
            )
        return {"execution": created.name, "workflow": workflow}

    def run(ctx: RunContext) -> dict[str, str]:
        return ctx.output(WORKFLOW_OUTPUT, lambda: start(ctx))

    run.__qualname__ = run.__name__ = f"workflow_target[{workflow.rsplit('/', 1)[-1]}]"
    return run


def cloud_run_job_target(
    job: str,
    *,
    container: str = "",
    token_env: str = TOKEN_ENV,
    client_factory: Callable[[], JobsClient] | None = None,
    timeout_s: float = CALL_TIMEOUT_S,
) -> JobFn:
    """A job that starts one execution of Cloud Run job `job` per run, without waiting for it.

    `job` is `projects/P/locations/L/jobs/J`. The run key reaches every task as
    the environment variable `token_env` (with `SCHEDULE_TIME`); inside, pair
    it with `CLOUD_RUN_TASK_INDEX` for a per-task key (see runledger.sdk.cloud_run_task).
    `container` names the container to override in a multi-container job.
    """
    if not _RUN_JOB.fullmatch(job):
        raise ValueError(f"{job!r} is not projects/P/locations/L/jobs/J")
    if not _ENV_NAME.fullmatch(token_env) or token_env == SCHEDULE_TIME_ENV:
        raise ValueError(f"{token_env!r} is not a usable environment variable name")
    client = _LazyClient(client_factory or _default_jobs_client)

    def start(ctx: RunContext) -> dict[str, str]:
        from google.cloud.run_v2 import EnvVar, RunJobRequest

        override = RunJobRequest.Overrides.ContainerOverride(
            name=container,
            env=[
                EnvVar(name=token_env, value=ctx.run_id),
                EnvVar(name=SCHEDULE_TIME_ENV, value=ctx.schedule_time.isoformat()),
            ],
        )
        request = RunJobRequest(
            name=job, overrides=RunJobRequest.Overrides(container_overrides=[override])
        )
        ctx.ensure_lease()
        with _classified(f"running {job}"):
            # Not waiting for the execution: it may run far longer than a request.
            operation = client.get().run_job(request=request, retry=None, timeout=timeout_s)
        metadata = operation.metadata
        return {
            "operation": operation.operation.name,
            "execution": getattr(metadata, "name", "") or "",
            "job": job,
        }

    def run(ctx: RunContext) -> dict[str, str]:
        return ctx.output(CLOUD_RUN_OUTPUT, lambda: start(ctx))

    run.__qualname__ = run.__name__ = f"cloud_run_job_target[{job.rsplit('/', 1)[-1]}]"
    return run
