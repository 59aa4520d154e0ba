"""What the audit reads and writes of the jobs' suspensions (`runledger.ledger.suspension`).

Per audit, one read per job with `suspendAfterFailures`: a suspended job is named in
the summary, and the audit logs one `suspended` finding when a suspension begins
(then marks it reported, so it pages once, not per audit nor per time). Each run it
finds `released` after Scheduler's last retry (or `failed`, if the delivery's own count
was lost) counts toward the job's suspension, as a failure for good at delivery does.
The operator CLI's audit only reads (`mark` and `count` None).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from runledger.ledger.run import RunIdentity
from runledger.ledger.suspension import Suspension
from runledger.schedules import JobSchedule


@dataclass(frozen=True)
class SuspensionAccess:
    # The documents of the jobs given, by job id (a job without one is left out).
    read: Callable[[Sequence[JobSchedule]], Mapping[str, Suspension]]
    # Mark a suspension's finding logged (None: a read-only audit, which shows it each time).
    mark: Callable[[str, Suspension], None] | None = None
    # Count one run found failed for good (its identity, the job's threshold, the error).
    count: Callable[[RunIdentity, int, str | None], None] | None = None


def detail(held: Suspension) -> str:
    """A suspension in one line: who, since when, why."""
    since = "" if held.since is None else f" since {held.since.isoformat()}"
    return f"suspended by {held.by}{since}: {held.note}"
