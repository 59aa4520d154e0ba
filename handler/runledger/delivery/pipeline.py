"""One path for a run's fate: claim, execute, finish, whatever started the run.

Every trigger (a Scheduler delivery, a forced run, the audit's catch-up and
backfill, a waiting duplicate's takeover) goes through `RunPipeline.run`: the
ledger's claim (which reads and writes the job's overlap slot in its own
commits, `ledger.overlap`), the one answer for each kind of claim result, the
job under a lease kept alive, and the fenced final write. What differs between
triggers is data: the run's `trigger` (on its record and log lines; a run the
audit starts waits for a running holder instead of being skipped), the body
the job gets, and whether a duplicate that meets a live lease waits for its
holder (only a delivery: `Trigger.wait`).

A job's active window (`startAt`/`endAt`, `schedules.JobSchedule.in_window`) is
the pipeline's first step, for every trigger: a time outside it is answered
200 `outside_window` before any read or write, so it costs nothing and is never
run. Each claim puts its start lag (claim time minus schedule time) on the log
line as `start_lag_s` (not for a forced run, whose ScheduleTime is not when it was due).

A job with `suspendAfterFailures` reads its suspension next (`ledger.suspension`):
suspended, the run is recorded `suspended` and answered 200 without running. Each of
its scheduled runs that ends completed or failed for good is counted after the final
write; the Nth failure in a row suspends the job.

A run that ends failed for good is published to the stack's dead-letter topic,
when it has one (`dead_letter`), after its `failed` write and whatever started it;
a duplicate of the failure that finds no letter noted on it publishes it then.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from runledger import facts
from runledger.delivery.dead_letter import KIND_FAILED, DeadLetters, dead_letter_id
from runledger.delivery.duplicate_wait import DuplicateWait, holder_working
from runledger.delivery.log import log_line
from runledger.delivery.responses import (
    Response,
    duplicate_response,
    error_text,
    outside_window_response,
    store_response,
    suspended_response,
    waited_response,
)
from runledger.exceptions import LeaseLost, StoreUnavailable, TerminalJobError
from runledger.ledger.lease import LeaseKeeper, Renewals
from runledger.ledger.machine import Ledger, may_take_over
from runledger.ledger.record import RunRecord, Status
from runledger.ledger.run import Claim, Duplicate, RunIdentity, Yielded
from runledger.ledger.suspension import AUTOMATIC, Suspension
from runledger.schedules import JobSchedule
from runledger.sdk.context import RunContext
from runledger.sdk.joblog import run_fields
from runledger.sdk.registry import JobFn


@dataclass(frozen=True)
class Trigger:
    """What one start of a run brings besides its identity.

    `wait`: the duplicate wait, or None (answered at once; a takeover, the audit's
    runs); `started`: the App's monotonic clock when the request began, which the wait's
    budget counts from. `holder_wait` (a backfill's run only): the wait for another
    running run of its `skip`/`delay` job before it claims again (None: pending at once).
    """

    body: bytes
    wait: DuplicateWait | None = None
    started: float = 0.0
    holder_wait: DuplicateWait | None = None


def cross_region(run: RunIdentity, holder_region: str | None) -> dict[str, object]:
    """The log field of a duplicate another region's delivery claimed first, if it is one.

    In a stack of several regions each region's Scheduler sends every time: one
    region's delivery runs it, the other's is this duplicate, answered 2xx like any
    (`facts`' outcomes unchanged) and counted apart, so it never reads as a retry storm.
    """
    if run.delivered_region is None or holder_region is None:
        return {}
    if run.delivered_region == holder_region:
        return {}
    return {facts.CROSS_REGION_FIELD: holder_region}


def _yielded(result: Yielded, fields: dict[str, object]) -> Response:
    """The answer of a run that yielded to its job's holder (`runledger.ledger.overlap`).

    Only a job with an overlap policy yields, so that module loads on its first yield.
    """
    from runledger.ledger.overlap import yielded_answer

    return Response(*yielded_answer(result, fields))


class RunPipeline:
    def __init__(
        self,
        ledger: Callable[[], Ledger],
        jobs: Callable[[], Mapping[str, JobFn]],
        clock: Callable[[], datetime],
        renewals: Renewals,
        monotonic: Callable[[], float] = time.monotonic,
        windows: Mapping[str, JobSchedule] | None = None,
        suspend_after: Mapping[str, int] | None = None,
        dead_letters: DeadLetters | None = None,
    ) -> None:
        """`windows`: the schedules of the jobs with an active window, by job id;
        `suspend_after`: each job's `suspendAfterFailures`, for the jobs that have one."""
        self._ledger = ledger
        self._jobs = jobs
        self._clock = clock
        self._renewals = renewals
        self._monotonic = monotonic
        self._windows = dict(windows or {})
        self._suspend_after = dict(suspend_after or {})
        # Where a run that ends failed for good is published (None: nowhere).
        self._dead_letters = dead_letters

    def run(self, run: RunIdentity, trigger: Trigger, fields: dict[str, object]) -> Response:
        """Claim the run and answer for its fate; `fields` collects the log line's fields."""
        windowed = self._windows.get(run.job)
        if windowed is not None and not windowed.in_window(run.schedule_time):
            return outside_window_response(windowed, fields)
        if run.job in self._suspend_after:
            try:
                held = self._ledger().suspension(run)
                if held is not None and held.suspended:
                    return self._suspended(run, held, fields)
            except StoreUnavailable as exc:
                return store_response(exc, "ledger unavailable before claim")
        try:
            result = self._ledger().claim(run)
        except StoreUnavailable as exc:
            return store_response(exc, "ledger unavailable before claim")
        if isinstance(result, Yielded):
            if trigger.holder_wait is not None:
                return self._await_holder(run, result, trigger, fields)
            return _yielded(result, fields)
        if isinstance(result, Duplicate):
            fields["attempt_id"] = result.record.attempt_id
            fields.update(cross_region(run, result.record.delivered_region))
            return self._answer_duplicate(run, result, trigger, fields)
        fields.update(attempt_id=result.attempt_id, attempts=result.attempts)
        if not run.manual:
            lag = result.record.claimed_at - run.schedule_time
            fields[facts.START_LAG_FIELD] = round(lag.total_seconds(), 3)
        return self._execute(run, result, trigger.body, fields)

    def _suspended(self, run: RunIdentity, held: Suspension, fields: dict[str, object]) -> Response:
        """The job is suspended: record the run `suspended` (never run) and answer 200."""
        fields.update(suspended_by=held.by, suspended_since=_text(held.since), note=held.note)
        written = self._ledger().record_suspended(run, f"suspended by {held.by}: {held.note}")
        if isinstance(written, Duplicate):
            fields["attempt_id"] = written.record.attempt_id
            return duplicate_response(written)
        fields["attempt_id"] = written.attempt_id
        return suspended_response(held)

    def _answer_duplicate(
        self, run: RunIdentity, duplicate: Duplicate, trigger: Trigger, fields: dict[str, object]
    ) -> Response:
        """Answer a duplicate; with a wait, one that meets a live lease waits for the outcome.

        The wait goes to the request's log line (seconds, reads): each waiting
        duplicate takes one of an instance's concurrent requests that long. A
        wait that sees the holder's lease run out (the holder died) takes the
        run over through this same pipeline, without a second wait, and answers
        for its own execution; the log line names the attempt taken over.
        """
        wait = trigger.wait
        if wait is None or duplicate.status is not Status.IN_PROGRESS:
            self._letter_owed(run, duplicate.record, fields)
            return duplicate_response(duplicate)
        ledger = self._ledger()
        try:
            waited = wait.wait(
                run.job,
                self._monotonic() - trigger.started,
                duplicate.record,
                lambda: ledger.read(run.key),
                self._clock,
            )
        except StoreUnavailable as exc:
            return store_response(exc, "ledger unavailable while waiting for the holder")
        fields.update(waited_s=round(waited.waited_s, 3), wait_polls=waited.polls)
        record = waited.record
        if record is None or (
            record.status is Status.IN_PROGRESS and may_take_over(record, self._clock())
        ):
            if record is not None:
                fields["took_over_from"] = record.attempt_id
            fields.pop(facts.CROSS_REGION_FIELD, None)  # it runs here after all
            return self.run(run, Trigger(trigger.body), fields)
        self._letter_owed(run, record, fields)
        return waited_response(record)

    def _letter_owed(self, run: RunIdentity, record: RunRecord, fields: dict[str, object]) -> None:
        """Publish a failure's dead letter its own attempt did not note as sent.

        The holder's write of `failed` may land with its answer lost (it answered 503),
        or the holder may die before its publish: Scheduler's retry of the run, answered
        as a duplicate of the failure, publishes it then (`DeadLetters.send` reads the
        record first, and a letter noted is not sent again), so it does not wait for an
        audit, which a deploy may keep from judging the time (seeds 702, 956).
        """
        if self._dead_letters is None or record.status is not Status.FAILED:
            return
        if record.dead_letter_id == dead_letter_id(run.key, record.attempt_id, KIND_FAILED):
            return
        fields["dead_letter"] = self._dead_letters.send(self._ledger(), run.key, KIND_FAILED)

    def _await_holder(
        self, run: RunIdentity, result: Yielded, trigger: Trigger, fields: dict[str, object]
    ) -> Response:
        """A backfill's run met its job's running holder: wait for it as a duplicate would.

        Tried only at an instant each audit, a time of a job whose runs nearly
        always overlap (a minutely `skip` job that fires when the audit does)
        would meet a holder at every audit and never run. So it polls the
        holder's record, within the job's duplicate-wait budget, and claims once
        more the moment the holder is done; still held then, it stays pending
        (`overlap_delayed`) for the next audit.
        """
        ledger = self._ledger()
        wait = trigger.holder_wait
        assert wait is not None  # the caller checked
        try:
            waited = wait.wait(
                run.job, 0.0, result.holder, lambda: ledger.read(result.holder_key), self._clock
            )
        except StoreUnavailable as exc:
            return store_response(exc, "ledger unavailable while waiting for the running run")
        if holder_working(waited.record, self._clock()):
            return _yielded(result, fields)
        return self.run(run, replace(trigger, holder_wait=None), fields)

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

        keeper = LeaseKeeper(self._ledger(), claim, on_lost, self._renewals)
        context = RunContext.for_attempt(run, keeper, body)
        keeper.start()
        try:
            with run_fields(context):
                self._jobs()[run.job](context)
        except LeaseLost as exc:
            keeper.stop()
            fields["error"] = str(exc)
            return Response(409, "lease_lost", "another attempt took over this run")
        except TerminalJobError as exc:
            return self._counted(
                self._finish(keeper, Status.FAILED, error_text(exc), fields), run, fields
            )
        except Exception as exc:
            return self._finish(keeper, Status.RELEASED, error_text(exc), fields)
        return self._counted(self._finish(keeper, Status.COMPLETED, None, fields), run, fields)

    def _counted(self, response: Response, run: RunIdentity, fields: dict[str, object]) -> Response:
        """Count a scheduled run's final outcome toward its job's suspension, once it is recorded.

        The answer stays what the final write made it: a count the store refuses is
        logged (`suspension_count`), and the audit's judging of later runs counts on.
        """
        threshold = self._suspend_after.get(run.job)
        recorded = response.outcome in ("completed", facts.OUTCOME_FAILED_TERMINAL)
        if threshold is None or run.manual or not recorded:
            return response
        failed = response.outcome != "completed"
        try:
            after = self._ledger().count_outcome(run, failed, threshold, _error(fields))
        except StoreUnavailable as exc:
            fields["suspension_count"] = f"not recorded: {exc}"
            return response
        if failed:
            fields["consecutive_failures"] = after.failures
        if after.suspended and failed and after.by == AUTOMATIC:
            fields["job_suspended"] = True
        return response

    def _finish(
        self,
        keeper: LeaseKeeper,
        status: Status,
        error: str | None,
        fields: dict[str, object],
    ) -> Response:
        claim = keeper.stop()
        fields["error"] = error
        ledger = self._ledger()
        try:
            if status is Status.COMPLETED:
                ledger.complete(claim)
                return Response(200, "completed", "run completed")
            if status is Status.FAILED:
                ledger.fail(claim, error or "")
                if self._dead_letters is not None:
                    key = claim.identity.key
                    fields["dead_letter"] = self._dead_letters.send(ledger, key, KIND_FAILED)
                return Response(
                    422, facts.OUTCOME_FAILED_TERMINAL, "run failed terminally; not retried"
                )
            ledger.release(claim, error or "")
            return Response(500, "failed_retryable", "run failed; released for a retry")
        except LeaseLost:
            return Response(
                409, "lease_lost", "another attempt took over this run; result not recorded"
            )
        except StoreUnavailable as exc:
            return store_response(exc, "could not record the outcome")


def _text(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _error(fields: Mapping[str, object]) -> str | None:
    error = fields.get("error")
    return error if isinstance(error, str) else None
