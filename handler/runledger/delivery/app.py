"""One delivery in, one status code out: the handler's logic, free of any web framework.

Status codes follow what Cloud Scheduler does with them: any 2xx ends the
run's retries, anything else keeps them going within the job's retry policy.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from runledger import facts
from runledger.audit.job import audit_job
from runledger.audit.scheduler_state import Lister, scheduler_lister
from runledger.backfill.queue import BackfillDocs, firestore_backfills
from runledger.config import Settings
from runledger.delivery.deadline import attempt_deadlines, outlived_deadline
from runledger.delivery.duplicate_wait import DuplicateWait
from runledger.delivery.identify import Delivery, identify_delivery, unstamped_window
from runledger.delivery.invoker import check_invoker
from runledger.delivery.log import log_line
from runledger.delivery.responses import (
    Response,
    duplicate_response,
    error_text,
    store_response,
    waited_response,
)
from runledger.exceptions import (
    BadRequest,
    LeaseLost,
    StoreUnavailable,
    TerminalJobError,
)
from runledger.ledger.lease import LeaseKeeper, Renewals, RenewalScheduler
from runledger.ledger.machine import Claim, Duplicate, Ledger, RunIdentity, may_take_over
from runledger.ledger.overlap import OverlapLedger, Yielded, yielded_answer
from runledger.ledger.record import RunRecord, Status
from runledger.ledger.store import RunStore
from runledger.schedules import AuditSettings, audit_settings, check_jobs
from runledger.sdk.context import RunContext
from runledger.sdk.joblog import run_fields
from runledger.sdk.registry import JobFn, load_jobs

MAX_BODY_BYTES = 1024 * 1024
_SEVERITY = {2: "INFO", 4: "WARNING", 5: "ERROR"}


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
        audit: AuditSettings | None = None,
        live: Lister | None = None,
        backfills: Callable[[], BackfillDocs] | None = None,
    ) -> None:
        """`audit` (None: no audit) is served under its own job id (`audit.job`) next to `jobs`.

        `live` lists the audited jobs' live state (None: Scheduler is not asked);
        `backfills` gives the backfill requests the audit runs (None: no backfill pass).
        """
        self.settings = settings
        self.jobs = jobs
        if audit is not None:
            run_audit = audit_job(
                audit,
                lease=settings.lease,
                ledger=lambda: self.ledger,
                catch_up=lambda run, trigger: self.catch_up(run, trigger).outcome,
                live=live,
                backfills=backfills,
                jobs=jobs,
            )
            self.jobs = {**jobs, audit.job: run_audit}
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
        self.deadlines = attempt_deadlines(audit)  # a run that outlives one is logged as such
        # The body each scheduled job's deliveries carry (DEDUP_SCHEDULES), which the
        # runs the audit starts itself (catch-up, backfill) hand to the job too.
        self.bodies = {
            schedule.id: schedule.body.encode()
            for schedule in (audit.schedules if audit is not None else ())
            if schedule.body is not None
        }

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> App:
        """Validate every setting now; connect to Firestore only on the first delivery.

        `clock` is the deployed handler's real time; only the local demo shifts it
        (`localrun.clocked_handler`).
        """
        settings = Settings.from_env(env)
        jobs = load_jobs(settings.jobs_module)

        def firestore_store() -> RunStore:
            from google.cloud import firestore

            from runledger.ledger.firestore_store import FirestoreRunStore

            client = firestore.Client(database=settings.database)
            return FirestoreRunStore(client, settings.collection)

        audit = audit_settings(env, settings)
        check_jobs(audit, jobs, settings.jobs_module)
        return cls(
            settings,
            jobs,
            firestore_store,
            clock=clock,
            duplicate_wait=configured_wait(settings, audit),
            zones={schedule.id: schedule.zone for schedule in audit.schedules},
            overlaps={schedule.id: schedule.overlap for schedule in audit.schedules},
            audit=audit,
            live=scheduler_lister(audit.project, audit.region, env),
            backfills=firestore_backfills(settings) if audit.schedules else None,
        )

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
        elapsed_s = time.monotonic() - started
        fields.update(outlived_deadline(fields, elapsed_s, self.deadlines))
        log_line(
            _SEVERITY.get(response.status // 100, "INFO"),
            response.message,
            outcome=response.outcome,
            status=response.status,
            duration_ms=round(elapsed_s * 1000, 1),
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
                trigger=run.trigger,
            )
            result = self.ledger.claim(run)
        except StoreUnavailable as exc:
            return store_response(exc, "ledger unavailable before claim")
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
            return duplicate_response(duplicate)
        try:
            waited = wait.wait(
                run.job, spent_s, duplicate.record, lambda: self.ledger.read(run.key), self._clock
            )
        except StoreUnavailable as exc:
            return store_response(exc, "ledger unavailable while waiting for the holder")
        fields.update(waited_s=round(waited.waited_s, 3), wait_polls=waited.polls)
        record = waited.record
        if record is None or (
            record.status is Status.IN_PROGRESS and may_take_over(record, self._clock())
        ):
            return self._take_over(run, record, body, fields)
        return waited_response(record)

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
            return store_response(exc, "ledger unavailable taking over from a dead holder")
        if isinstance(result, Yielded):
            return Response(*yielded_answer(result, fields))
        if isinstance(result, Duplicate):
            fields["attempt_id"] = result.record.attempt_id
            return duplicate_response(result)
        fields.update(attempt_id=result.attempt_id, attempts=result.attempts)
        return self._execute(run, result, body, fields)

    def catch_up(self, run: RunIdentity, trigger: str = facts.TRIGGER_CATCH_UP) -> Response:
        """Run a scheduled run the audit found missed or released, claimed as a delivery is.

        A late Scheduler retry of the same run races this on the one claim, so
        exactly one of them runs the job. The job gets the body its Scheduler job
        sends, as DEDUP_SCHEDULES says (none: empty). `trigger`
        says who asked (the catch-up, or a backfill request: `runledger.backfill.runs`).
        """
        run = replace(run, trigger=trigger)
        fields: dict[str, object] = {}
        try:
            result = self.ledger.claim(run)
        except StoreUnavailable as exc:
            return store_response(exc, "ledger unavailable before claim")
        if isinstance(result, Yielded):
            return Response(*yielded_answer(result, fields))
        if isinstance(result, Duplicate):
            return duplicate_response(result)
        return self._execute(run, result, self.bodies.get(run.job, b""), fields)

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
            log_line(
                "WARNING",
                "lease lost while the job runs",
                run_key=run.key,
                trigger=run.trigger,
                reason=reason,
            )

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
            return self._finish(keeper, Status.FAILED, error_text(exc), fields)
        except Exception as exc:
            return self._finish(keeper, Status.RELEASED, error_text(exc), fields)
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
                return Response(
                    422, facts.OUTCOME_FAILED_TERMINAL, "run failed terminally; not retried"
                )
            self.ledger.release(claim, error or "")
            return Response(500, "failed_retryable", "run failed; released for a retry")
        except LeaseLost:
            return Response(
                409, "lease_lost", "another attempt took over this run; result not recorded"
            )
        except StoreUnavailable as exc:
            return store_response(exc, "could not record the outcome")
