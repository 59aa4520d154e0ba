"""The audit's log lines: one per finding, then one summary (its absence means no audit ran).

The stack's log-based metrics and alerts count these lines by `outcome`
(`facts.OUTCOME_*`), and the summary's fields are what an operator reads first.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import IO, Any

from runledger import facts
from runledger.audit.findings import AuditFinding, AuditReport, Finding, rfc3339
from runledger.delivery.log import log_line
from runledger.schedules import AUDIT_JOB_ID

# Still-open findings the summary line lists by name (all are counted in `open`).
OPEN_SHOWN = 50

_SEVERITY = {
    Finding.MISSED: "ERROR",
    Finding.STALE: "ERROR",
    Finding.FAILED: "ERROR",
    Finding.RELEASED: "WARNING",
    Finding.DRIFTED: "ERROR",
    Finding.UNAUDITABLE: "ERROR",
    Finding.PAUSE_LOG_DISAGREES: "WARNING",
    Finding.SUSPENDED: "WARNING",
    Finding.UNJUDGED: "ERROR",
}


def log_report(report: AuditReport, stream: IO[str] | None = None, job: str = AUDIT_JOB_ID) -> None:
    """One structured line per finding, then one summary line (its absence means no audit ran).

    job: the audit's own job id (DEDUP_AUDIT_JOB), which the summary line carries.
    """
    log_findings(report.findings, stream)
    log_summary(report, stream, job)


def log_findings(findings: Sequence[AuditFinding], stream: IO[str] | None = None) -> None:
    """One structured line per finding: the handler's audit logs them before its watermarks move."""
    for item in findings:
        if item.schedule_time is None:
            log_line(
                _SEVERITY[item.finding],
                f"job {item.finding.value}: {item.job}: {item.detail}",
                stream,
                outcome=item.finding.outcome,
                job=item.job,
                detail=item.detail,
                **({} if item.span is None else _span(item.span)),
            )
            continue
        message = f"scheduled run {item.finding.value}: {item.job} at {rfc3339(item.schedule_time)}"
        if item.detail is not None:
            message += f": {item.detail}"
        log_line(
            _SEVERITY[item.finding],
            message,
            stream,
            outcome=item.finding.outcome,
            job=item.job,
            schedule_time=rfc3339(item.schedule_time),
            run_key=item.run_key,
            attempts=None if item.record is None else item.record.attempts,
            error=None if item.record is None else item.record.error,
            catch_up=item.catch_up,
            trigger=None if item.catch_up is None else facts.TRIGGER_CATCH_UP,
            detail=item.detail,
        )


def _span(span: tuple[datetime, datetime]) -> dict[str, str]:
    return {"from": rfc3339(span[0]), "to": rfc3339(span[1])}


def log_summary(
    report: AuditReport, stream: IO[str] | None = None, job: str = AUDIT_JOB_ID
) -> None:
    """The summary line, after the findings' lines.

    job: the audit's own job id (DEDUP_AUDIT_JOB), which the summary line carries.
    """
    counts = {kind.value: 0 for kind in Finding}
    for item in report.findings:
        counts[item.finding.value] += 1
    log_line(
        "WARNING" if report.findings or report.open or report.expired else "INFO",
        summary_text(report),
        stream,
        outcome=facts.OUTCOME_AUDIT_SUMMARY,
        job=job,
        window_start=rfc3339(report.window_start),
        window_end=rfc3339(report.window_end),
        jobs=report.jobs,
        checked=report.checked,
        pending=report.pending,
        before_epoch=report.before_epoch,
        reads=report.reads,
        findings=len(report.findings),
        caught_up=sum(1 for item in report.findings if item.catch_up is not None),
        paused_jobs=[
            {"job": item.job, "since": None if item.since is None else rfc3339(item.since)}
            for item in report.paused
        ],
        paused_runs=report.paused_runs,
        skipped=report.skipped,
        suspended_runs=report.suspended_runs,
        suspended_jobs=[{"job": job, "detail": detail} for job, detail in report.suspended],
        open=len(report.open),
        open_findings=[_open_entry(item) for item in report.open[:OPEN_SHOWN]],
        deferred=report.deferred,
        expired=report.expired,
        scheduler_read=report.scheduler_unread is None,
        scheduler_unread=report.scheduler_unread,
        pause_history_unread=report.history_unread,
        backfill=report.backfill,
        **counts,
    )


def _open_entry(item: AuditFinding) -> dict[str, Any]:
    """A still-open finding as the summary lists it."""
    when = None if item.schedule_time is None else rfc3339(item.schedule_time)
    return {"job": item.job, "schedule_time": when, "finding": item.finding.value}


def summary_text(report: AuditReport) -> str:
    """The summary's words: findings, the paused jobs (not findings), where job states came from."""
    text = f"audit: {len(report.findings)} finding(s) in {report.checked} scheduled run(s)"
    if report.open:
        text += f"; {len(report.open)} reported earlier, still open"
    if report.deferred:
        text += f"; {report.deferred} settled run(s) left for the next audit"
    if report.expired:
        text += f"; {report.expired} run(s) left the look-back unjudged (no audit ran in time)"
    if report.paused:
        shown = ", ".join(item.describe() for item in report.paused)
        text += f"; paused (not run, not findings): {shown}"
    if report.skipped:
        text += f"; {report.skipped} run(s) skipped by their overlap policy (not findings)"
    if report.suspended:
        shown = ", ".join(f"{job} ({detail})" for job, detail in report.suspended)
        text += f"; suspended (not run, not findings): {shown}"
    return f"{text}; {report.job_states}"
