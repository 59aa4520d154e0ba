"""What the audit finds: the verdict on one settled run, and the report of one audit.

`judge` holds a run's records against the ledger's own rules (a lease that
ran out is stale exactly when `ledger.machine.may_take_over` lets a delivery
take the run over); the report carries the findings, the runs not judged and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from runledger import facts
from runledger.audit.expected import ExpectedRun
from runledger.ledger.machine import may_take_over
from runledger.ledger.overlap import skipped
from runledger.ledger.record import RunRecord, Status


class Finding(StrEnum):
    MISSED = "missed"
    STALE = "stale"
    FAILED = "failed"
    RELEASED = "released"
    # One per job, not per run: the job's runs were not judged (see the module doc).
    DRIFTED = "drifted"
    UNAUDITABLE = "unauditable"
    # The job's pause log disagrees with its live state or the last audit's sighting:
    # its runs are judged as of unknown state (`audit.pauses`).
    PAUSE_LOG_DISAGREES = "pause_log_disagrees"
    # One per suspension of a job (`ledger.suspension`), logged once when it begins.
    SUSPENDED = "suspended"
    # One per span of a job's times that left the look-back before an audit judged them.
    UNJUDGED = "unjudged"

    @property
    def per_job(self) -> bool:
        return self in (
            Finding.DRIFTED,
            Finding.UNAUDITABLE,
            Finding.PAUSE_LOG_DISAGREES,
            Finding.SUSPENDED,
            Finding.UNJUDGED,
        )

    @property
    def outcome(self) -> str:
        """The `outcome` of the finding's log line, which the stack's log-based metrics count."""
        return _OUTCOMES[self]


_OUTCOMES = {
    Finding.MISSED: facts.OUTCOME_RUN_MISSED,
    Finding.STALE: facts.OUTCOME_RUN_STALE,
    Finding.FAILED: facts.OUTCOME_RUN_FAILED,
    Finding.RELEASED: facts.OUTCOME_RUN_RELEASED,
    Finding.DRIFTED: facts.OUTCOME_JOB_DRIFTED,
    Finding.UNAUDITABLE: facts.OUTCOME_JOB_UNAUDITABLE,
    Finding.PAUSE_LOG_DISAGREES: facts.OUTCOME_JOB_PAUSE_LOG_DISAGREES,
    Finding.SUSPENDED: facts.OUTCOME_JOB_SUSPENDED,
    Finding.UNJUDGED: facts.OUTCOME_JOB_RUNS_UNJUDGED,
}


@dataclass(frozen=True)
class AuditFinding:
    job: str
    schedule_time: datetime | None  # None for a finding about the whole job
    finding: Finding
    run_key: str | None
    record: RunRecord | None
    catch_up: str | None = None  # the outcome of the audit's own attempt, if it made one
    # Why: for a finding about the whole job, or a run missed while its job's state is unknown.
    detail: str | None = None
    # The first and last schedule time a finding about several of the job's times names.
    span: tuple[datetime, datetime] | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "job": self.job,
            "schedule_time": None if self.schedule_time is None else rfc3339(self.schedule_time),
            "finding": self.finding.value,
            "run_key": self.run_key,
        }
        if self.record is not None:
            data.update(attempts=self.record.attempts, error=self.record.error)
        if self.catch_up is not None:
            data["catch_up"] = self.catch_up
        if self.detail is not None:
            data["detail"] = self.detail
        if self.span is not None:
            data["from"], data["to"] = (rfc3339(moment) for moment in self.span)
        return data


@dataclass(frozen=True)
class PausedJob:
    """A job deliberately not run: paused since `since` (None: Scheduler did not say)."""

    job: str
    since: datetime | None

    def describe(self) -> str:
        return self.job + ("" if self.since is None else f" since {rfc3339(self.since)}")


@dataclass(frozen=True)
class AuditReport:
    window_start: datetime
    window_end: datetime
    jobs: int
    checked: int  # schedule times that had settled and were judged
    pending: int  # schedule times still inside their retry window
    before_epoch: int  # schedule times before their job's epoch: never judged
    reads: int  # documents read: epochs or watermarks, and the runs judged
    findings: list[AuditFinding] = field(default_factory=list)
    # Findings an earlier audit reported whose runs are still not done: shown, not logged again.
    open: tuple[AuditFinding, ...] = ()
    deferred: int = 0  # settled runs left, unread, for the next audit (over READ_BUDGET)
    # Runs between a watermark and the look-back's start: no audit ran in time to judge them.
    expired: int = 0
    paused: tuple[PausedJob, ...] = ()
    paused_runs: int = 0  # schedule times of paused jobs: deliberately not run, not judged
    skipped: int = 0  # runs an overlap policy skipped: deliberately not run, not findings
    suspended_runs: int = 0  # runs recorded suspended (their job was): deliberately not run
    # The jobs suspended now (`ledger.suspension`): job id -> who, since when, the note.
    suspended: tuple[tuple[str, str], ...] = ()
    # Why Cloud Scheduler was not read; None: read. Absent (a local run): job states come
    # from DEDUP_SCHEDULES; else they are unknown (`audit.pauses`).
    scheduler_unread: str | None = None
    scheduler_absent: bool = False
    # Why Scheduler's pause history (its audit log) was not read; None: read, or not asked.
    history_unread: str | None = None
    # What the pass over pending backfill requests did (`runledger.backfill.runs`); None: no pass.
    backfill: dict[str, Any] | None = None

    @property
    def job_states(self) -> str:
        """Where the jobs' paused state and live schedules came from, for the summary."""
        if self.scheduler_unread is None:
            if self.history_unread is None:
                return "job states from Cloud Scheduler"
            return (
                f"job states from Cloud Scheduler, pause history not read ({self.history_unread}):"
                " missed runs reported, not caught up"
            )
        if self.scheduler_absent:
            return (
                f"Cloud Scheduler not read ({self.scheduler_unread}): "
                "job states from DEDUP_SCHEDULES"
            )
        return (
            f"Cloud Scheduler not read ({self.scheduler_unread}): job states unknown, "
            "missed runs reported, not caught up"
        )


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def not_run(records: Sequence[RunRecord]) -> bool:
    """Whether a time's records say it was deliberately not run: skipped, or suspended."""
    return skipped(records) or suspended(records)


def suspended(records: Sequence[RunRecord]) -> bool:
    """Whether a time's records say its job was suspended: deliberately not run."""
    return any(record.status is Status.SUSPENDED for record in records)


def judge(
    run: ExpectedRun, records: Sequence[RunRecord], now: datetime, lease: timedelta
) -> Finding | None:
    """The finding for a settled run given its unexpired records (at most one per instant)."""
    if now < run.settles_at(lease):
        return None
    if not records:
        return Finding.MISSED
    if any(record.status is Status.COMPLETED for record in records) or not_run(records):
        return None
    record = records[0]
    if record.status is Status.IN_PROGRESS:
        return Finding.STALE if may_take_over(record, now) else None
    return Finding.FAILED if record.status is Status.FAILED else Finding.RELEASED
