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
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from runledger.audit import install_audit
from runledger.config import Settings
from runledger.context import RunContext
from runledger.delivery import Delivery, identify_delivery, unstamped_window
from runledger.exceptions import (
    BadRequest,
    LeaseLost,
    StorePermissionDenied,
    StoreUnavailable,
    StoreUnusable,
    TerminalJobError,
)
from runledger.invoker import check_invoker
from runledger.joblog import run_fields
from runledger.jobs import JobFn, load_jobs
from runledger.lease import LeaseKeeper, Renewals, RenewalScheduler
from runledger.ledger import Claim, Duplicate, Ledger, RunIdentity, may_take_over
from runledger.log import log_line
from runledger.overlap import OverlapLedger, Yielded, yielded_answer
from runledger.record import RunRecord, Status
from runledger.scheduler_state import scheduler_lister
from runledger.schedules import AuditSettings, audit_settings, check_jobs
from runledger.store import RunStore
from runledger.wait import DuplicateWait

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


def _store_response(exc: StoreUnavailable, what: str) -> Response:
    """Every store failure answers non-2xx, so Cloud Scheduler delivers the run again.

    The outcome names the cause an operator must act on: a permission the
    deploy granted but IAM has not applied yet, or a database that can never
    hold the ledger.
    """
    if isinstance(exc, StoreUnusable):
        return Response(500, "store_unusable", f"{what}: {exc}")
    if isinstance(exc, StorePermissionDenied):
        return Response(503, "store_permission_denied", f"{what}: {exc}")
    return Response(503, "store_unavailable", f"{what}: {exc}")


def _duplicate_response(duplicate: Duplicate) -> Response:
    record = duplicate.record
    if duplicate.status is Status.COMPLETED:
        return Response(200, "duplicate_completed", "run already completed; work not repeated")
    if duplicate.status is Status.FAILED:
        return Response(422, "duplicate_failed", f"run failed terminally: {record.error}")
    if duplicate.status is Status.SKIPPED:
        return Response(
            200, "duplicate_skipped", f"run skipped, yielded to run {record.yielded_to}"
        )
    return Response(
        409,
        "duplicate_in_progress",
        f"run in progress under attempt {record.attempt_id} until "
        f"{record.lease_expires.isoformat()}",
    )


def _waited_response(record: RunRecord) -> Response:
    """What the holder's outcome means for Scheduler, as the duplicate learnt it by waiting.

    Completed answers 200 and failed for good 422, as for a duplicate of a run
    already in that state. A retryable failure answers 500, as the holder did,
    so Scheduler retries and its next delivery claims the released run. Still
    held when the wait ran out: 409 as without a wait. (A record that is gone or
    whose lease ran out is claimed by the waiting delivery instead: `App._take_over`.)
    """
    holder = f"attempt {record.attempt_id}"
    if record.status is Status.COMPLETED:
        return Response(
            200,
            "duplicate_waited_completed",
            f"run completed under {holder} while this delivery waited; work not repeated",
        )
    if record.status is Status.FAILED:
        return Response(
            422, "duplicate_waited_failed", f"run failed terminally under {holder}: {record.error}"
        )
    if record.status is Status.RELEASED:
        return Response(
            500,
            "duplicate_waited_released",
            f"run failed retryably under {holder} ({record.error}); released for a retry",
        )
    return _duplicate_response(Duplicate(record.status, record))


def configured_wait(settings: Settings, audit: AuditSettings) -> DuplicateWait | None:
    """The duplicate wait DEDUP_DUPLICATE_WAIT_SECONDS asks for, bounded by each job's deadline."""
    if settings.duplicate_wait == timedelta(0):
        return None
    deadlines = {schedule.id: schedule.attempt_deadline for schedule in audit.schedules}
    return DuplicateWait(deadlines, settings.lease, settings.duplicate_wait)


class App:
    def __init__(
        self,
        settings: Settings,
        jobs: Mapping[str, JobFn],
        store_factory: Callable[[], RunStore],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        new_attempt_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        renewals: Renewals | None = None,
        duplicate_wait: DuplicateWait | None = None,
        zones: Mapping[str, ZoneInfo] | None = None,
        overlaps: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.jobs = jobs
        self._store_factory = store_factory
        self._clock = clock
        self._new_attempt_id = new_attempt_id
        # Every run of this App renews its lease on the same few threads.
        self._renewals = RenewalScheduler() if renewals is None else renewals
        self._ledger: Ledger | None = None
        self._ledger_lock = threading.Lock()
        # None: an in-progress duplicate is answered 409 at once.
        self._duplicate_wait = duplicate_wait
        # Each scheduled job's time zone (DEDUP_SCHEDULES): a wall time the clocks repeat
        # is one run (`delivery.wall_time_instant`).
        self.zones = dict(zones or {})
        # Each scheduled job's overlap policy (DEDUP_SCHEDULES; absent: allow).
        self.overlaps = dict(overlaps or {})

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

        audit = audit_settings(env, settings)
        check_jobs(audit, jobs, settings.jobs_module)
        app = cls(
            settings,
            jobs,
            firestore_store,
            duplicate_wait=configured_wait(settings, audit),
            zones={schedule.id: schedule.zone for schedule in audit.schedules},
            overlaps={schedule.id: schedule.overlap for schedule in audit.schedules},
        )
        install_audit(app, audit, scheduler_lister(audit.project, audit.region, env))
        return app

    @property
    def ledger(self) -> Ledger:
        with self._ledger_lock:
            if self._ledger is None:
                self._ledger = OverlapLedger(
                    self._store_factory(),
                    policies=self.overlaps,
                    lease=self.settings.lease,
                    retention=self.settings.retention,
                    clock=self._clock,
                    new_attempt_id=self._new_attempt_id,
                    heartbeat=self.settings.heartbeat,
                )
            return self._ledger

    def handle(self, method: str, headers: Iterable[tuple[str, str]], body: bytes) -> Response:
        started = time.monotonic()
        fields: dict[str, object] = {}
        response = self._respond(method, list(headers), body, fields, started)
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
        started: float,
    ) -> Response:
        if method.upper() != "POST":
            return Response(405, "rejected", f"method {method[:10]!r} not allowed; use POST")
        if len(body) > MAX_BODY_BYTES:
            return Response(413, "rejected", f"body larger than {MAX_BODY_BYTES} bytes")
        try:
            check_invoker(
                headers, self.settings.allowed_invokers, self.settings.allowed_invoker_ids
            )
            delivery = identify_delivery(
                headers, self.settings, self.jobs, self._clock(), self.zones
            )
        except BadRequest as exc:
            return Response(exc.status, "rejected", exc.reason)
        try:
            run = self._joined(delivery, fields)
            fields.update(
                run_key=run.key,
                job=run.job,
                schedule_time=run.schedule_time.isoformat(),
                manual=run.manual,
            )
            result = self.ledger.claim(run)
        except StoreUnavailable as exc:
            return _store_response(exc, "ledger unavailable before claim")
        if isinstance(result, Yielded):
            return Response(*yielded_answer(result, fields))
        if isinstance(result, Duplicate):
            fields["attempt_id"] = result.record.attempt_id
            return self._answer_duplicate(run, result, body, time.monotonic() - started, fields)
        fields.update(attempt_id=result.attempt_id, attempts=result.attempts)
        return self._execute(run, result, body, fields)

    def _answer_duplicate(
        self,
        run: RunIdentity,
        duplicate: Duplicate,
        body: bytes,
        spent_s: float,
        fields: dict[str, object],
    ) -> Response:
        """Answer a duplicate; one that meets a live lease first waits for the holder's outcome.

        The wait goes to the request's log line (seconds, reads): each waiting
        duplicate takes one of an instance's concurrent requests that long. A
        wait that sees the holder's lease run out (the holder died) claims the
        run itself and answers for its own execution.
        """
        wait = self._duplicate_wait
        if wait is None or duplicate.status is not Status.IN_PROGRESS:
            return _duplicate_response(duplicate)
        try:
            waited = wait.wait(
                run.job, spent_s, duplicate.record, lambda: self.ledger.read(run.key), self._clock
            )
        except StoreUnavailable as exc:
            return _store_response(exc, "ledger unavailable while waiting for the holder")
        fields.update(waited_s=round(waited.waited_s, 3), wait_polls=waited.polls)
        record = waited.record
        if record is None or (
            record.status is Status.IN_PROGRESS and may_take_over(record, self._clock())
        ):
            return self._take_over(run, record, body, fields)
        return _waited_response(record)

    def _take_over(
        self,
        run: RunIdentity,
        seen: RunRecord | None,
        body: bytes,
        fields: dict[str, object],
    ) -> Response:
        """Claim a run whose holder's lease ran out during the wait, as any delivery claims.

        The same fenced claim as a first delivery's: if another delivery took the
        run first, this one is its duplicate. The log line names the attempt taken over.
        """
        if seen is not None:
            fields["took_over_from"] = seen.attempt_id
        try:
            result = self.ledger.claim(run)
        except StoreUnavailable as exc:
            return _store_response(exc, "ledger unavailable taking over from a dead holder")
        if isinstance(result, Yielded):
            return Response(*yielded_answer(result, fields))
        if isinstance(result, Duplicate):
            fields["attempt_id"] = result.record.attempt_id
            return _duplicate_response(result)
        fields.update(attempt_id=result.attempt_id, attempts=result.attempts)
        return self._execute(run, result, body, fields)

    def catch_up(self, run: RunIdentity) -> Response:
        """Run a scheduled run the audit found missed or released, claimed as a delivery is.

        A late Scheduler retry of the same run races this on the one claim, so
        exactly one of them runs the job. The job sees an empty body.
        """
        fields: dict[str, object] = {}
        try:
            result = self.ledger.claim(run)
        except StoreUnavailable as exc:
            return _store_response(exc, "ledger unavailable before claim")
        if isinstance(result, Yielded):
            return Response(*yielded_answer(result, fields))
        if isinstance(result, Duplicate):
            return _duplicate_response(result)
        return self._execute(run, result, b"", fields)

    def _joined(self, delivery: Delivery, fields: dict[str, object]) -> RunIdentity:
        """The run an unstamped forced run's copy belongs to: the earlier window's, if it began.

        Copies are recognised as one run for at least one window after the first
        arrived and at most two; a copy arriving later runs the job again. The
        window goes to the log line so a repeat can be explained.
        """
        if delivery.earlier is None:
            return delivery.run
        window = int(unstamped_window(self.settings).total_seconds())
        fields["unstamped_forced_run_window_s"] = window
        found = self.ledger.read(delivery.earlier.key)
        if found is not None and not found.is_expired(self._clock()):
            return delivery.earlier
        return delivery.run

    def _execute(
        self, run: RunIdentity, claim: Claim, body: bytes, fields: dict[str, object]
    ) -> Response:
        def on_lost(reason: str) -> None:
            log_line("WARNING", "lease lost while the job runs", run_key=run.key, reason=reason)

        keeper = LeaseKeeper(self.ledger, claim, on_lost, self._renewals)
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
            return _store_response(exc, "could not record the outcome")
