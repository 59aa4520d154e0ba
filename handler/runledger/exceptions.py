"""Every error the ledger raises, in one place, so callers map them to status codes."""

from __future__ import annotations


class LedgerError(Exception):
    """Base class for the run ledger's own errors."""


class ConfigError(LedgerError):
    """A DEDUP_* setting is missing or invalid; the message names the variable."""


class BadRequest(LedgerError):
    """The delivery cannot be keyed: headers missing, malformed or not allowed.

    `status` is the HTTP status the handler answers with; nothing is written.
    """

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class RecordExists(LedgerError):
    """`create` found a record under the key already."""


class VersionConflict(LedgerError):
    """A fenced write found the record changed (or gone) since the version it was given."""


class StoreUnavailable(LedgerError):
    """The store did not answer; the outcome of the last write is unknown."""


class StorePermissionDenied(StoreUnavailable):
    """The store refused the handler's account (PermissionDenied).

    Retryable like an outage: IAM grants made by the same deploy can take
    minutes to apply, and the run must still happen once they do.
    """


class StoreUnusable(StoreUnavailable):
    """The database cannot hold the ledger at all (e.g. it is in Datastore mode).

    Deliveries still answer non-2xx so nothing is lost, but no retry fixes it:
    the deployment has to point at a Firestore database in Native mode.
    """


class LeaseLost(LedgerError):
    """Another attempt took over the run; this attempt must not finish it."""


class TerminalJobError(Exception):
    """Raise from a job to mark the run failed for good: no automatic re-run.

    Any other exception is treated as retryable: the claim is released and
    Cloud Scheduler's retry policy delivers the run again.
    """


class SchedulerUnreadable(Exception):
    """Cloud Scheduler could not be read; the message says why, in one line."""


class SchedulerAbsent(SchedulerUnreadable):
    """There is no Cloud Scheduler to read (a local run): DEDUP_SCHEDULES is the jobs' state."""
