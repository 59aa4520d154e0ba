"""What a delivery is answered: a status code Cloud Scheduler acts on, an outcome, a message.

`service.app` says how Cloud Scheduler treats each status code; the outcome
names what happened, for the handler's log line and the stack's metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

from runledger import facts
from runledger.exceptions import StorePermissionDenied, StoreUnavailable, StoreUnusable
from runledger.ledger.record import RunRecord, Status
from runledger.ledger.run import Duplicate
from runledger.ledger.suspension import Suspension
from runledger.schedules import JobSchedule


@dataclass(frozen=True)
class Response:
    status: int
    outcome: str
    message: str

    def body(self) -> dict[str, str]:
        return {"outcome": self.outcome, "message": self.message}


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def store_response(exc: StoreUnavailable, what: str) -> Response:
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


def duplicate_response(duplicate: Duplicate) -> Response:
    record = duplicate.record
    if duplicate.status is Status.COMPLETED:
        return Response(200, "duplicate_completed", "run already completed; work not repeated")
    if duplicate.status is Status.FAILED:
        return Response(422, "duplicate_failed", f"run failed terminally: {record.error}")
    if duplicate.status is Status.SUSPENDED:
        return Response(
            200, "duplicate_suspended", f"run recorded suspended earlier: {record.error}"
        )
    if duplicate.status is Status.SKIPPED:
        return Response(
            200, "duplicate_skipped", f"run skipped, yielded to run {record.yielded_to}"
        )
    return Response(
        409,
        facts.OUTCOME_DUPLICATE_IN_PROGRESS,
        f"run in progress under attempt {record.attempt_id} until "
        f"{record.lease_expires.isoformat()}",
    )


def waited_response(record: RunRecord) -> Response:
    """What the holder's outcome means for Scheduler, as the duplicate learnt it by waiting.

    Completed answers 200 and failed for good 422, as for a duplicate of a run
    already in that state. A retryable failure answers 500, as the holder did,
    so Scheduler retries and its next delivery claims the released run. Still
    held when the wait ran out: 409 as without a wait. (A record that is gone or
    whose lease ran out is claimed by the waiting delivery instead, through the same
    pipeline: `delivery.pipeline`.)
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
    return duplicate_response(Duplicate(record.status, record))


def outside_window_response(job: JobSchedule, fields: dict[str, object]) -> Response:
    """A time outside its job's active window: 200, so Scheduler stops retrying; never run.

    Nothing is written: the audit never expects such a time, so there is nothing to
    record it against. The window goes to the log line.
    """
    start = None if job.start_at is None else job.start_at.isoformat()
    end = None if job.end_at is None else job.end_at.isoformat()
    fields.update(active_from=start, active_until=end)
    return Response(
        200,
        facts.OUTCOME_OUTSIDE_WINDOW,
        f"outside the job's active window ({start or 'open'} .. {end or 'open'}); not run",
    )


def suspended_response(held: Suspension) -> Response:
    """The job is suspended: 200 ends Scheduler's retries; the run is recorded, never run."""
    since = "" if held.since is None else f" since {held.since.isoformat()}"
    return Response(
        200,
        facts.OUTCOME_SUSPENDED,
        f"job suspended by {held.by}{since} ({held.note}); run recorded suspended, not run",
    )
