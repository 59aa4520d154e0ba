"""Whether a delivery's run went on past its Scheduler attempt's deadline.

Cloud Scheduler ends an attempt at the job's `attemptDeadline` while the handler's
request (and the job) goes on: Scheduler records the attempt as failed and may
retry, and once the caller has gone, whether Cloud Run still counts the request as
being processed (CPU for the lease's heartbeat under request-based billing) is not
documented. Such a run is marked on its log line, so the dashboard counts them
before one is lost; docs/work.md gives the rule that follows.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from runledger import facts
from runledger.schedules import AuditSettings


def attempt_deadlines(audit: AuditSettings | None) -> dict[str, timedelta]:
    """Each scheduled job's attempt deadline, as DEDUP_SCHEDULES gives it."""
    schedules = audit.schedules if audit is not None else ()
    return {schedule.id: schedule.attempt_deadline for schedule in schedules}


def outlived_deadline(
    fields: Mapping[str, object], elapsed_s: float, deadlines: Mapping[str, timedelta]
) -> dict[str, object]:
    """The log fields of a delivery that ran its job for longer than the job's deadline.

    `attempt_deadline_s` and `facts.OUTLIVED_DEADLINE_FIELD` (seconds past it) when
    this delivery claimed the run (`attempts` in its fields) and took longer than
    its job's deadline; nothing otherwise.
    """
    deadline = deadlines.get(str(fields.get("job")))
    if deadline is None or "attempts" not in fields:
        return {}
    over_s = elapsed_s - deadline.total_seconds()
    if over_s <= 0:
        return {}
    return {
        "attempt_deadline_s": int(deadline.total_seconds()),
        facts.OUTLIVED_DEADLINE_FIELD: round(over_s, 1),
    }
