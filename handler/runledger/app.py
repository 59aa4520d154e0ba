"""One delivery in, one status code out: the handler's logic, free of any web framework.

Status codes follow what Cloud Scheduler does with them: any 2xx ends the
run's retries, anything else keeps them going within the job's retry policy.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from runledger.config import Settings
from runledger.context import RunContext
from runledger.delivery import identify_run
from runledger.exceptions import (
    BadRequest,
    LeaseLost,
    StoreUnavailable,
    TerminalJobError,
)
from runledger.invoker import check_invoker
from runledger.joblog import run_fields
from runledger.jobs import JobFn, load_jobs
from runledger.lease import LeaseKeeper
from runledger.ledger import Claim, Duplicate, Ledger, RunIdentity
from runledger.log import log_line
from runledger.record import Status
from runledger.store import RunStore

MAX_BODY_BYTES = 1024 * 1024
_SEVERITY = {2: "INFO", 4: "WARNING", 5: "ERROR"}


@dataclass(frozen=True)
class Response:
    status: int
    outcome: str
    message: str

    def body(self) -> dict[str, str]:
        return {"outcome": self.outcome, "message": self.message}


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _duplicate_response(duplicate: Duplicate) -> Response:
    record = duplicate.record
    if duplicate.status is Status.COMPLETED:
        return Response(200, "duplicate_completed", "run already completed; work not repeated")
    if duplicate.status is Status.FAILED:
        return Response(422, "duplicate_failed", f"run failed terminally: {record.error}")
    return Response(
        409,
        "duplicate_in_progress",
        f"run in progress under attempt {record.attempt_id} until "
        f"{record.lease_expires.isoformat()}",
    )


class App:
    def __init__(
        self,
        settings: Settings,
        jobs: Mapping[str, JobFn],
        store_factory: Callable[[], RunStore],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        new_attempt_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self.settings = settings
        self.jobs = jobs
        self._store_factory = store_factory
        self._clock = clock
        self._new_attempt_id = new_attempt_id
        self._ledger: Ledger | None = None
        self._ledger_lock = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> App:
        """Validate every setting now; connect to Firestore only on the first delivery."""
        settings = Settings.from_env(env)
        jobs = load_jobs(settings.jobs_module)

        def firestore_store() -> RunStore:
            from google.cloud import firestore

            from runledger.firestore_store import FirestoreRunStore

            client = firestore.Client(database=settings.database)
            return FirestoreRunStore(client, settings.collection)

        return cls(settings, jobs, firestore_store)

    @property
    def ledger(self) -> Ledger:
        with self._ledger_lock:
            if self._ledger is None:
                self._ledger = Ledger(
                    self._store_factory(),
                    lease=self.settings.lease,
                    retention=self.settings.retention,
                    clock=self._clock,
                    new_attempt_id=self._new_attempt_id,
                )
            return self._ledger

    def handle(self, method: str, headers: Iterable[tuple[str, str]], body: bytes) -> Response:
        started = time.monotonic()
        fields: dict[str, object] = {}
        response = self._respond(method, list(headers), body, fields)
        log_line(
            _SEVERITY.get(response.status // 100, "INFO"),
            response.message,
            outcome=response.outcome,
            status=response.status,
            duration_ms=round((time.monotonic() - started) * 1000, 1),
            **fields,
        )
        return response

    def _respond(
        self,
        method: str,
        headers: list[tuple[str, str]],
        body: bytes,
        fields: dict[str, object],
    ) -> Response:
        if method.upper() != "POST":
            return Response(405, "rejected", f"method {method[:10]!r} not allowed; use POST")
        if len(body) > MAX_BODY_BYTES:
            return Response(413, "rejected", f"body larger than {MAX_BODY_BYTES} bytes")
        try:
            check_invoker(headers, self.settings.allowed_invokers)
            run = identify_run(headers, self.settings, self.jobs, self._clock())
        except BadRequest as exc:
            return Response(exc.status, "rejected", exc.reason)
        fields.update(
            run_key=run.key,
            job=run.job,
            schedule_time=run.schedule_time.isoformat(),
            manual=run.manual,
        )
        try:
            result = self.ledger.claim(run)
        except StoreUnavailable as exc:
            return Response(503, "store_unavailable", f"ledger unavailable before claim: {exc}")
        if isinstance(result, Duplicate):
            fields["attempt_id"] = result.record.attempt_id
            return _duplicate_response(result)
        fields.update(attempt_id=result.attempt_id, attempts=result.attempts)
        return self._execute(run, result, body, fields)

    def _execute(
        self, run: RunIdentity, claim: Claim, body: bytes, fields: dict[str, object]
    ) -> Response:
        def on_lost(reason: str) -> None:
            log_line("WARNING", "lease lost while the job runs", run_key=run.key, reason=reason)

        keeper = LeaseKeeper(self.ledger, claim, on_lost)
        context = RunContext.for_attempt(run, keeper, body)
        keeper.start()
        try:
            with run_fields(context):
                self.jobs[run.job](context)
        except LeaseLost as exc:
            keeper.stop()
            fields["error"] = str(exc)
            return Response(409, "lease_lost", "another attempt took over this run")
        except TerminalJobError as exc:
            return self._finish(keeper, Status.FAILED, _error_text(exc), fields)
        except Exception as exc:
            return self._finish(keeper, Status.RELEASED, _error_text(exc), fields)
        return self._finish(keeper, Status.COMPLETED, None, fields)

    def _finish(
        self,
        keeper: LeaseKeeper,
        status: Status,
        error: str | None,
        fields: dict[str, object],
    ) -> Response:
        claim = keeper.stop()
        fields["error"] = error
        try:
            if status is Status.COMPLETED:
                self.ledger.complete(claim)
                return Response(200, "completed", "run completed")
            if status is Status.FAILED:
                self.ledger.fail(claim, error or "")
                return Response(422, "failed_terminal", "run failed terminally; not retried")
            self.ledger.release(claim, error or "")
            return Response(500, "failed_retryable", "run failed; released for a retry")
        except LeaseLost:
            return Response(
                409, "lease_lost", "another attempt took over this run; result not recorded"
            )
        except StoreUnavailable as exc:
            return Response(503, "store_unavailable", f"could not record the outcome: {exc}")
