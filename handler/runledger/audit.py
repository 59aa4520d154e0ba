"""The audit: every scheduled time of every job, held against the ledger.

It takes each job's schedule times in a look-back window from
`runledger.expected` (daylight saving included), computes each run's key exactly as a delivery would
(`delivery.run_key`: project, region, job, time, "scheduled"), and reads those
documents by key in batches. No query and no index: the only permission it
needs is the `datastore.entities.get` the handler already has. Forced runs have
keys of their own ("manual"), so they are never taken for expected runs.

Only schedule times at or after the job's epoch count (`runledger.epochs`: when
an audit first saw the job with its current schedule and time zone), so the
look-back before a deploy, a new job or a schedule change is never reported
nor caught up. A run is judged only once it has settled: its last possible
attempt is over (schedule time + the job's retry window + the lease + clock
skew). Then:

    no record                        -> missed
    in_progress, lease ran out       -> stale
    failed                           -> failed
    released (retryable failure)     -> released   (Scheduler's retries are over)
    completed, or still running      -> nothing to report

Cost: one epoch read per job, and one document read per expected run, that is
the sum over the N jobs of their schedule times in the window (two for a wall
time a daylight-saving change repeats), in batches of `BATCH` keys.
`expected.MAX_READS` caps one audit; a larger audit is refused, before it reads or
writes anything, with a message saying how many reads it would take.

The core is pure: the clock, the record reader, the epochs and the catch-up
runner are injected, so it runs the same in the handler (which records
epochs), in the CLI (which only reads them) and in tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import IO, TYPE_CHECKING, Any

from runledger.delivery import run_key
from runledger.expected import ExpectedRun, expected_runs
from runledger.ledger import MAX_CLOCK_SKEW, RunIdentity
from runledger.log import log_line
from runledger.record import RunRecord, Status
from runledger.schedules import AUDIT_JOB_ID, AuditSettings, JobSchedule

if TYPE_CHECKING:
    from runledger.app import App
    from runledger.context import RunContext

# Keys per batch read: one BatchGetDocuments call each.
BATCH = 300


class Finding(StrEnum):
    MISSED = "missed"
    STALE = "stale"
    FAILED = "failed"
    RELEASED = "released"

    @property
    def outcome(self) -> str:
        """The `outcome` of the finding's log line, which the stack's log-based metrics count."""
        return f"run_{self.value}"


Reader = Callable[[Sequence[str]], Mapping[str, RunRecord]]
# Each audited job's epoch at the audit's `now`; a job left out is judged over the whole window.
Epochs = Callable[[Sequence[JobSchedule], datetime], Mapping[str, datetime]]


@dataclass(frozen=True)
class AuditFinding:
    job: str
    schedule_time: datetime
    finding: Finding
    run_key: str
    record: RunRecord | None
    catch_up: str | None = None  # the outcome of the audit's own attempt, if it made one

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "job": self.job,
            "schedule_time": rfc3339(self.schedule_time),
            "finding": self.finding.value,
            "run_key": self.run_key,
        }
        if self.record is not None:
            data.update(attempts=self.record.attempts, error=self.record.error)
        if self.catch_up is not None:
            data["catch_up"] = self.catch_up
        return data


@dataclass(frozen=True)
class AuditReport:
    window_start: datetime
    window_end: datetime
    jobs: int
    checked: int  # schedule times that had settled and were judged
    pending: int  # schedule times still inside their retry window
    before_epoch: int  # schedule times before their job's epoch: never judged
    reads: int  # documents read: the jobs' epochs and the settled runs
    findings: list[AuditFinding] = field(default_factory=list)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def judge(
    run: ExpectedRun, records: Sequence[RunRecord], now: datetime, lease: timedelta
) -> Finding | None:
    """The finding for a settled run given its unexpired records (at most one per instant)."""
    if now < run.settles_at(lease):
        return None
    if not records:
        return Finding.MISSED
    if any(record.status is Status.COMPLETED for record in records):
        return None
    record = records[0]
    if record.status is Status.IN_PROGRESS:
        return Finding.STALE if record.lease_expires + MAX_CLOCK_SKEW <= now else None
    return Finding.FAILED if record.status is Status.FAILED else Finding.RELEASED


class Audit:
    """One pass over the schedules; `catch_up` (if given) runs a catch-up job's missed runs."""

    def __init__(
        self,
        settings: AuditSettings,
        *,
        lease: timedelta,
        read: Reader,
        clock: Callable[[], datetime],
        epochs: Epochs,
        catch_up: Callable[[RunIdentity], str] | None = None,
    ) -> None:
        self._settings = settings
        self._lease = lease
        self._read = read
        self._clock = clock
        self._epochs = epochs
        self._catch_up = catch_up

    def identity(self, job: str, schedule_time: datetime) -> RunIdentity:
        """The scheduled (not forced) run of `job` at `schedule_time`, keyed as its delivery is."""
        project, region = self._settings.project, self._settings.region
        key = run_key(job, schedule_time, project, region, manual=False)
        return RunIdentity(key, job, schedule_time, project, region, manual=False)

    def run(self, lookback: timedelta | None = None, job: str | None = None) -> AuditReport:
        now = self._clock()
        start = now - (lookback or self._settings.lookback)
        schedules = [s for s in self._settings.schedules if job is None or s.id == job]
        listed = expected_runs(schedules, start, now)  # refuses an audit too large, unread
        epochs = self._epochs(schedules, now) if schedules else {}
        runs = [run for run in listed if run.schedule_time >= epochs.get(run.job.id, start)]
        settled = [run for run in runs if run.settles_at(self._lease) <= now]
        keys = {
            (run.job.id, instant): self.identity(run.job.id, instant).key
            for run in settled
            for instant in run.instants
        }
        wanted = list(keys.values())
        records: dict[str, RunRecord] = {}
        for offset in range(0, len(wanted), BATCH):
            records.update(self._read(wanted[offset : offset + BATCH]))
        findings = []
        for run in settled:
            present = [
                (instant, records[keys[run.job.id, instant]])
                for instant in run.instants
                if keys[run.job.id, instant] in records
                # past expire_at a record is as good as absent (TTL deletion is lazy)
                and not records[keys[run.job.id, instant]].is_expired(now)
            ]
            finding = judge(run, [record for _, record in present], now, self._lease)
            if finding is not None:
                when = present[0][0] if present else run.schedule_time
                record = present[0][1] if present else None
                findings.append(self._finding(run.job, when, finding, record, now))
        return AuditReport(
            window_start=start,
            window_end=now,
            jobs=len(schedules),
            checked=len(settled),
            pending=len(runs) - len(settled),
            before_epoch=len(listed) - len(runs),
            reads=len(schedules) + len(wanted),
            findings=findings,
        )

    def _finding(
        self,
        job: JobSchedule,
        schedule_time: datetime,
        finding: Finding,
        record: RunRecord | None,
        now: datetime,
    ) -> AuditFinding:
        identity = self.identity(job.id, schedule_time)
        catch_up = None
        if (
            self._catch_up is not None
            and job.catch_up
            and finding in (Finding.MISSED, Finding.RELEASED)
            and now - schedule_time <= job.catch_up_max_age
        ):
            catch_up = self._catch_up(identity)
        return AuditFinding(job.id, schedule_time, finding, identity.key, record, catch_up)


_SEVERITY = {
    Finding.MISSED: "ERROR",
    Finding.STALE: "ERROR",
    Finding.FAILED: "ERROR",
    Finding.RELEASED: "WARNING",
}


def log_report(report: AuditReport, stream: IO[str] | None = None, job: str = AUDIT_JOB_ID) -> None:
    """One structured line per finding, then one summary line (its absence means no audit ran).

    job: the audit's own job id (DEDUP_AUDIT_JOB), which the summary line carries.
    """
    for item in report.findings:
        message = f"scheduled run {item.finding.value}: {item.job} at {rfc3339(item.schedule_time)}"
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
        )
    counts = {kind.value: 0 for kind in Finding}
    for item in report.findings:
        counts[item.finding.value] += 1
    log_line(
        "WARNING" if report.findings else "INFO",
        f"audit: {len(report.findings)} finding(s) in {report.checked} scheduled run(s)",
        stream,
        outcome="audit_summary",
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
        **counts,
    )


def install_audit(app: App, settings: AuditSettings) -> None:
    """Serve the reserved audit job id from `app`, claimed and deduplicated like any run.

    The stack's audit Scheduler job delivers under `settings.job` (DEDUP_AUDIT_JOB);
    the audit then runs as that run's job, so two deliveries of one audit time audit once. Each
    catch-up goes through `app.catch_up`, the same claim as a delivery, so a late
    Scheduler retry of that run and the audit cannot both run it.
    """

    def audit_job(context: RunContext) -> None:
        def catch_up(run: RunIdentity) -> str:
            context.ensure_lease()  # an audit that lost its run stops catching up
            return app.catch_up(run).outcome

        audit = Audit(
            settings,
            lease=app.settings.lease,
            read=app.ledger.read_many,
            clock=app.ledger.now,
            epochs=lambda schedules, now: app.ledger.audit_epochs(
                settings.project, settings.region, schedules, now
            ),
            catch_up=catch_up,
        )
        log_report(audit.run(), job=settings.job)

    app.jobs = {**app.jobs, settings.job: audit_job}
