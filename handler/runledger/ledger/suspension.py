"""A job's suspension: the ledger-side switch that stops its runs, by hand or after failures.

A job with `suspendAfterFailures: N` (DEDUP_SCHEDULES) has one document, beside the
runs but not among them: how many of its scheduled runs in a row ended failed for
good, and whether the job is suspended, why (`failures` or `operator`), by whom,
since when and with what note. Cloud Scheduler keeps firing; every delivery of a
suspended job is answered 200 `suspended` and its run recorded `suspended`, a final
status the audit counts as deliberately not run (`delivery.pipeline`). No new grant:
the handler writes it with the permissions it has for runs.

Counting is by schedule time: an outcome counts only for a time later than the last
one counted (`Suspension.last_time`), so a retry's or the audit's second look at a
run never counts twice, and an older run finishing late never undoes a newer one's
count. A failure for good (a `TerminalJobError`, or a run the audit finds `released`
after Scheduler's last retry) adds one; a completion resets the count to zero (and
writes only when there was a count). The Nth suspends the job. `ops resume` ends
any suspension, automatic or by hand, and resets the count.

Every write is a compare-and-set on the version read, so concurrent counts, an
operator's suspend and a resume never lose each other's change. The document lives
outside runledger_audit (`SUSPENSION_COLLECTION`), so deleting the audit's working
documents never resumes a job.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from runledger.exceptions import RecordExists, StoreUnavailable, VersionConflict

# The documents live at SUSPENSION_COLLECTION/<ledger collection>/jobs/<key>.
SUSPENSION_COLLECTION = "runledger_suspensions"
REASON_FAILURES = "failures"
REASON_OPERATOR = "operator"
# Who an automatic suspension is by, on the document and in `ops describe`.
AUTOMATIC = "runledger (suspendAfterFailures)"
_ROUNDS = 5
_MAX_NOTE_CHARS = 500


@dataclass(frozen=True)
class Suspension:
    """One job's failure count and suspension state, as its document holds them."""

    job: str
    failures: int = 0
    last_time: datetime | None = None  # the latest schedule time counted
    suspended: bool = False
    reason: str | None = None
    note: str | None = None
    by: str | None = None
    since: datetime | None = None
    # When the audit logged the `suspended` finding of this suspension (once: it pages).
    reported_at: datetime | None = None
    # The last resume, kept for `ops describe`.
    resumed_at: datetime | None = None
    resumed_by: str | None = None
    resume_note: str | None = None

    def to_document(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_document(cls, data: Mapping[str, Any]) -> Suspension:
        known = set(cls.__dataclass_fields__)
        return cls(**{key: value for key, value in data.items() if key in known})

    def to_json(self) -> dict[str, Any]:
        def text(moment: datetime | None) -> str | None:
            return None if moment is None else moment.isoformat()

        return {
            "suspended": self.suspended,
            "reason": self.reason,
            "note": self.note,
            "by": self.by,
            "since": text(self.since),
            "failures": self.failures,
            "resumed_at": text(self.resumed_at),
            "resumed_by": self.resumed_by,
            "resume_note": self.resume_note,
        }


@dataclass(frozen=True)
class StoredSuspension:
    suspension: Suspension
    version: Any


@runtime_checkable
class SuspensionStore(Protocol):
    """Where each job's suspension document lives; a store reads, creates and compare-and-sets."""

    def get_suspension(self, key: str) -> StoredSuspension | None:
        """The document and its version, or None if the job has none."""

    def create_suspension(self, key: str, suspension: Suspension) -> Any:
        """Write a new document; RecordExists if the key is taken."""

    def replace_suspension(self, key: str, suspension: Suspension, version: Any) -> Any:
        """Overwrite the document if still at `version`; VersionConflict if not (or gone)."""


class SuspensionRefused(Exception):
    """An operator's suspend or resume the ledger will not write; the message says why."""


def suspension_key(project: str, region: str, job: str) -> str:
    """The job's document id: fixed length, whatever the job id (as epochs and slots are)."""
    canonical = "\n".join(["suspension-v1", project, region, job])
    return hashlib.sha256(canonical.encode()).hexdigest()


def read(store: SuspensionStore, key: str) -> Suspension | None:
    found = store.get_suspension(key)
    return None if found is None else found.suspension


def change(
    store: SuspensionStore,
    key: str,
    job: str,
    step: Callable[[Suspension], Suspension | None],
) -> Suspension:
    """Apply `step` to the job's document (a fresh one if none) by compare-and-set; the result.

    `step` returns the new state, or None to write nothing (the state returned is then
    the one read). It may raise SuspensionRefused, which goes up with nothing written.
    """
    for _ in range(_ROUNDS):
        found = store.get_suspension(key)
        current = Suspension(job) if found is None else found.suspension
        updated = step(current)
        if updated is None or updated == current:
            return current
        try:
            if found is None:
                store.create_suspension(key, updated)
            else:
                store.replace_suspension(key, updated, found.version)
        except (RecordExists, VersionConflict):
            continue  # another writer moved first: look again
        return updated
    raise StoreUnavailable(f"the suspension of job {job!r} kept changing under concurrent writes")


def counted(
    schedule_time: datetime, failed: bool, threshold: int, now: datetime, error: str | None
) -> Callable[[Suspension], Suspension | None]:
    """The step that counts one run's final outcome (see the module doc); None: nothing to write."""

    def step(current: Suspension) -> Suspension | None:
        if current.last_time is not None and schedule_time <= current.last_time:
            return None  # counted already, or older than a run counted since
        if not failed:
            return (
                replace(current, failures=0, last_time=schedule_time) if current.failures else None
            )
        failures = current.failures + 1
        updated = replace(current, failures=failures, last_time=schedule_time)
        if current.suspended or failures < threshold:
            return updated
        last = schedule_time.isoformat()
        note = f"{failures} scheduled runs in a row failed for good, the last at {last}"
        if error:
            note += f": {error}"
        return _suspended(updated, REASON_FAILURES, note, AUTOMATIC, now)

    return step


def suspended_by(note: str, by: str, now: datetime) -> Callable[[Suspension], Suspension]:
    """The step of an operator's `ops suspend`: refused if the job is suspended already."""

    def step(current: Suspension) -> Suspension:
        if current.suspended:
            raise SuspensionRefused(
                f"job {current.job!r} is suspended already ({_state(current)}); nothing written"
            )
        return _suspended(current, REASON_OPERATOR, note, by, now)

    return step


def _suspended(current: Suspension, reason: str, note: str, by: str, now: datetime) -> Suspension:
    """`current` suspended from `now` for `reason`, not yet reported by an audit."""
    return replace(
        current,
        suspended=True,
        reason=reason,
        note=note[:_MAX_NOTE_CHARS],
        by=by,
        since=now,
        reported_at=None,
    )


def resumed_by(note: str | None, by: str, now: datetime) -> Callable[[Suspension], Suspension]:
    """The step of `ops resume`: ends a suspension of either kind and resets the count."""

    def step(current: Suspension) -> Suspension:
        if not current.suspended:
            raise SuspensionRefused(f"job {current.job!r} is not suspended; nothing written")
        return replace(
            current,
            suspended=False,
            failures=0,
            resumed_at=now,
            resumed_by=by,
            resume_note=None if note is None else note[:_MAX_NOTE_CHARS],
        )

    return step


def reported(since: datetime, now: datetime) -> Callable[[Suspension], Suspension | None]:
    """The audit's mark that it logged the finding of the suspension that began at `since`."""

    def step(current: Suspension) -> Suspension | None:
        if not current.suspended or current.since != since or current.reported_at is not None:
            return None
        return replace(current, reported_at=now)

    return step


def _state(current: Suspension) -> str:
    since = "" if current.since is None else f" since {current.since.isoformat()}"
    return f"by {current.by}{since}: {current.note}"
