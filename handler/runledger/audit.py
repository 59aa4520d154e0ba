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
    in_progress, lease ran out       -> stale      (`ledger.may_take_over` says so)
    failed                           -> failed
    released (retryable failure)     -> released   (Scheduler's retries are over)
    completed, or still running      -> nothing to report

Before that, each job's live state comes from Cloud Scheduler, one listing per
audit (`runledger.scheduler_state`); where Scheduler cannot be read, from
DEDUP_SCHEDULES, and the summary says so. Per job:

    paused (live, or `paused` in DEDUP_SCHEDULES)
                     -> its times since the pause (all, if Scheduler gives no
                        time) are deliberately not run: listed in the summary,
                        neither findings nor caught up
    live schedule or time zone differs from DEDUP_SCHEDULES, or not in Scheduler
                     -> one finding `drifted` for the job, its runs not judged
    times cannot be listed (croniter fails)
                     -> one finding `unauditable` for the job; the others are audited

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
from runledger.expected import ExpectedRun, listed_runs
from runledger.ledger import RunIdentity, may_take_over
from runledger.log import log_line
from runledger.record import RunRecord, Status
from runledger.scheduler_state import Lister, LiveJob, SchedulerUnreadable
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
    # One per job, not per run: the job's runs were not judged (see the module doc).
    DRIFTED = "drifted"
    UNAUDITABLE = "unauditable"

    @property
    def per_job(self) -> bool:
        return self in (Finding.DRIFTED, Finding.UNAUDITABLE)

    @property
    def outcome(self) -> str:
        """The `outcome` of the finding's log line, which the stack's log-based metrics count."""
        return f"job_{self.value}" if self.per_job else f"run_{self.value}"


# The findings the audit's catch-up redoes (a stale run through the takeover rule).
_CAUGHT_UP = (Finding.MISSED, Finding.STALE, Finding.RELEASED)


Reader = Callable[[Sequence[str]], Mapping[str, RunRecord]]
# Each audited job's epoch at the audit's `now`; a job left out is judged over the whole window.
Epochs = Callable[[Sequence[JobSchedule], datetime], Mapping[str, datetime]]


@dataclass(frozen=True)
class AuditFinding:
    job: str
    schedule_time: datetime | None  # None for a finding about the whole job
    finding: Finding
    run_key: str | None
    record: RunRecord | None
    catch_up: str | None = None  # the outcome of the audit's own attempt, if it made one
    detail: str | None = None  # why, for a finding about the whole job

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
    reads: int  # documents read: the jobs' epochs and the settled runs
    findings: list[AuditFinding] = field(default_factory=list)
    paused: tuple[PausedJob, ...] = ()
    paused_runs: int = 0  # schedule times of paused jobs: deliberately not run, not judged
    # Why Cloud Scheduler was not read (job states then come from DEDUP_SCHEDULES); None: read.
    scheduler_unread: str | None = None

    @property
    def job_states(self) -> str:
        """Where the jobs' paused state and live schedules came from, for the summary."""
        if self.scheduler_unread is None:
            return "job states from Cloud Scheduler"
        return (
            f"Cloud Scheduler not read ({self.scheduler_unread}): job states from DEDUP_SCHEDULES"
        )


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
        return Finding.STALE if may_take_over(record, now) else None
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
        live: Lister | None = None,
    ) -> None:
        self._settings = settings
        self._lease = lease
        self._read = read
        self._clock = clock
        self._epochs = epochs
        self._catch_up = catch_up
        self._live = live

    def identity(self, job: str, schedule_time: datetime) -> RunIdentity:
        """The scheduled (not forced) run of `job` at `schedule_time`, keyed as its delivery is."""
        project, region = self._settings.project, self._settings.region
        key = run_key(job, schedule_time, project, region, manual=False)
        return RunIdentity(key, job, schedule_time, project, region, manual=False)

    def _live_jobs(self) -> tuple[Mapping[str, LiveJob] | None, str | None]:
        """The live jobs by id, or None and why Scheduler was not read."""
        if self._live is None:
            return None, "no lister"
        try:
            return self._live(), None
        except SchedulerUnreadable as exc:
            return None, str(exc)

    def run(self, lookback: timedelta | None = None, job: str | None = None) -> AuditReport:
        now = self._clock()
        start = now - (lookback or self._settings.lookback)
        schedules = [s for s in self._settings.schedules if job is None or s.id == job]
        live, unread = self._live_jobs() if schedules else (None, None)
        findings: list[AuditFinding] = []
        paused: list[PausedJob] = []
        judged: list[JobSchedule] = []
        for schedule in schedules:
            drift = _drift(schedule, live)
            if drift:
                findings.append(_job_finding(schedule.id, Finding.DRIFTED, drift))
                continue
            state = None if live is None else live[schedule.id]
            if schedule.paused if state is None else state.paused:
                paused.append(PausedJob(schedule.id, None if state is None else state.since))
            judged.append(schedule)
        listed, failures = listed_runs(judged, start, now)  # refuses an audit too large, unread
        for job_id, reason in failures.items():
            findings.append(_job_finding(job_id, Finding.UNAUDITABLE, reason))
        epochs = self._epochs(judged, now) if judged else {}
        runs = [run for run in listed if run.schedule_time >= epochs.get(run.job.id, start)]
        pauses = {item.job: item.since for item in paused}
        held = [run for run in runs if _paused_at(run, pauses)]
        runs = [run for run in runs if not _paused_at(run, pauses)]
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
            before_epoch=len(listed) - len(runs) - len(held),
            reads=len(judged) + len(wanted),
            findings=findings,
            paused=tuple(paused),
            paused_runs=len(held),
            scheduler_unread=unread,
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
            and finding in _CAUGHT_UP
            and now - schedule_time <= job.catch_up_max_age
        ):
            catch_up = self._catch_up(identity)
        return AuditFinding(job.id, schedule_time, finding, identity.key, record, catch_up)


def _drift(job: JobSchedule, live: Mapping[str, LiveJob] | None) -> str:
    """How the job's live schedule differs from DEDUP_SCHEDULES; "" if it does not or is unknown."""
    if live is None:
        return ""
    state = live.get(job.id)
    if state is None:
        return "not in Cloud Scheduler: no run of it will be sent"
    deployed = (" ".join(job.schedule.split()), job.time_zone)
    if (state.schedule, state.time_zone) == deployed:
        return ""
    return (
        f"Cloud Scheduler has {state.schedule!r} in {state.time_zone}, DEDUP_SCHEDULES "
        f"{deployed[0]!r} in {deployed[1]}: its runs are not judged until they agree "
        "(edit the stack's config, or undo the edit, and deploy)"
    )


def _job_finding(job: str, finding: Finding, detail: str) -> AuditFinding:
    return AuditFinding(job, None, finding, None, None, detail=detail)


def _paused_at(run: ExpectedRun, pauses: Mapping[str, datetime | None]) -> bool:
    """Whether the run falls in its job's pause (a pause of unknown start covers the window)."""
    if run.job.id not in pauses:
        return False
    since = pauses[run.job.id]
    return since is None or run.instants[-1] >= since


_SEVERITY = {
    Finding.MISSED: "ERROR",
    Finding.STALE: "ERROR",
    Finding.FAILED: "ERROR",
    Finding.RELEASED: "WARNING",
    Finding.DRIFTED: "ERROR",
    Finding.UNAUDITABLE: "ERROR",
}


def log_report(report: AuditReport, stream: IO[str] | None = None, job: str = AUDIT_JOB_ID) -> None:
    """One structured line per finding, then one summary line (its absence means no audit ran).

    job: the audit's own job id (DEDUP_AUDIT_JOB), which the summary line carries.
    """
    for item in report.findings:
        if item.schedule_time is None:
            log_line(
                _SEVERITY[item.finding],
                f"job {item.finding.value}: {item.job}: {item.detail}",
                stream,
                outcome=item.finding.outcome,
                job=item.job,
                detail=item.detail,
            )
            continue
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
        summary_text(report),
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
        paused_jobs=[
            {"job": item.job, "since": None if item.since is None else rfc3339(item.since)}
            for item in report.paused
        ],
        paused_runs=report.paused_runs,
        scheduler_read=report.scheduler_unread is None,
        scheduler_unread=report.scheduler_unread,
        **counts,
    )


def summary_text(report: AuditReport) -> str:
    """The summary's words: findings, the paused jobs (not findings), where job states came from."""
    text = f"audit: {len(report.findings)} finding(s) in {report.checked} scheduled run(s)"
    if report.paused:
        shown = ", ".join(item.describe() for item in report.paused)
        text += f"; paused (not run, not findings): {shown}"
    return f"{text}; {report.job_states}"


def install_audit(app: App, settings: AuditSettings, live: Lister | None = None) -> None:
    """Serve the reserved audit job id from `app`, claimed and deduplicated like any run.

    The stack's audit Scheduler job delivers under `settings.job` (DEDUP_AUDIT_JOB);
    the audit then runs as that run's job, so two deliveries of one audit time audit once. Each
    catch-up goes through `app.catch_up`, the same claim as a delivery, so a late
    Scheduler retry of that run and the audit cannot both run it. `live` lists
    the jobs' live state (None: Scheduler is not asked, DEDUP_SCHEDULES says).
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
            live=live,
        )
        log_report(audit.run(), job=settings.job)

    app.jobs = {**app.jobs, settings.job: audit_job}
