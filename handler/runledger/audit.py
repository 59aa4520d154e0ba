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
    skipped (`runledger.overlap`)    -> deliberately not run: counted in the summary

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

Two ways to run. The handler's audit (`install_audit`) goes from each job's
watermark (`runledger.watermarks`): it reads the watermark shards (at most one
document per job), the runs settled since, and the runs still open, so each
settled run is read once and each finding logged once; findings still open are
carried in the summary (`open`, `open_findings`). It reads at most READ_BUDGET
runs; the rest wait behind the watermark for the next audit. The operator CLI
judges its whole window each time from the epochs alone: one epoch read per job
and one document read per expected run (two for a wall time a daylight-saving
change repeats), in batches of `BATCH` keys; `expected.MAX_READS` caps it, and a
larger one is refused, before it reads or writes anything, with a message
saying how many reads it would take.

The core is pure: the clock, the record reader, the epochs and the catch-up
runner are injected, so it runs the same in the handler (which records
epochs), in the CLI (which only reads them) and in tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import IO, TYPE_CHECKING, Any

from runledger.delivery import run_key
from runledger.expected import ExpectedRun, listed_runs, schedule_times
from runledger.ledger import RunIdentity, may_take_over
from runledger.log import log_line
from runledger.overlap import skipped
from runledger.record import RunRecord, Status
from runledger.scheduler_state import Lister, LiveJob, SchedulerUnreadable
from runledger.schedules import AUDIT_JOB_ID, AuditSettings, JobSchedule
from runledger.watermarks import MAX_OPEN_PER_JOB, JobMark, LedgerMarks, OpenRun

if TYPE_CHECKING:
    from runledger.app import App
    from runledger.context import RunContext

# Keys per batch read: one BatchGetDocuments call each.
BATCH = 300
# Run documents the handler's audit reads at most, shared evenly by its jobs
# (at least one run each); settled runs beyond a job's share wait, unjudged and
# behind its watermark, for the next audit. 5,000 jobs every 5 minutes need 6
# reads a job per 30-minute audit; their share is 10, so a backlog drains too.
READ_BUDGET = 50_000


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
    if any(record.status is Status.COMPLETED for record in records) or skipped(records):
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
        epochs: Epochs | None = None,
        catch_up: Callable[[RunIdentity], str] | None = None,
        live: Lister | None = None,
        marks: LedgerMarks | None = None,
    ) -> None:
        """Exactly one of `epochs` (judge the whole look-back) and `marks` (from the watermarks)."""
        if (epochs is None) == (marks is None):
            raise TypeError("Audit takes exactly one of epochs and marks")
        self._settings = settings
        self._lease = lease
        self._read = read
        self._clock = clock
        self._epochs = epochs
        self._marks = marks
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
        base = AuditReport(
            window_start=start,
            window_end=now,
            jobs=len(schedules),
            checked=0,
            pending=0,
            before_epoch=0,
            reads=0,
            findings=findings,
            paused=tuple(paused),
            scheduler_unread=unread,
        )
        if self._marks is not None:
            return self._run_marked(self._marks, base, judged)
        assert self._epochs is not None  # one of the two, checked on construction
        listed, failures = listed_runs(judged, start, now)  # refuses an audit too large, unread
        for job_id, reason in failures.items():
            findings.append(_job_finding(job_id, Finding.UNAUDITABLE, reason))
        epochs = self._epochs(judged, now) if judged else {}
        runs = [run for run in listed if run.schedule_time >= epochs.get(run.job.id, start)]
        pauses = {item.job: item.since for item in paused}
        held = [run for run in runs if _paused_at(run, pauses)]
        runs = [run for run in runs if not _paused_at(run, pauses)]
        settled = [run for run in runs if run.settles_at(self._lease) <= now]
        keys = self._keys(settled)
        records = self._read_all(list(keys.values()))
        skips = 0
        for run in settled:
            present = _present(run, records, keys, now)
            skips += skipped([record for _, record in present])
            finding = judge(run, [record for _, record in present], now, self._lease)
            if finding is not None:
                when = present[0][0] if present else run.schedule_time
                record = present[0][1] if present else None
                findings.append(self._finding(run.job, when, finding, record, now))
        return replace(
            base,
            checked=len(settled),
            pending=len(runs) - len(settled),
            before_epoch=len(listed) - len(runs) - len(held),
            reads=len(judged) + len(keys),
            paused_runs=len(held),
            skipped=skips,
        )

    def _keys(self, runs: Sequence[ExpectedRun]) -> dict[tuple[str, datetime], str]:
        """The run key of every instant of `runs`, by (job, instant)."""
        return {
            (run.job.id, instant): self.identity(run.job.id, instant).key
            for run in runs
            for instant in run.instants
        }

    def _read_all(self, wanted: Sequence[str]) -> dict[str, RunRecord]:
        records: dict[str, RunRecord] = {}
        for offset in range(0, len(wanted), BATCH):
            records.update(self._read(wanted[offset : offset + BATCH]))
        return records

    def _run_marked(
        self, marks: LedgerMarks, base: AuditReport, judged: Sequence[JobSchedule]
    ) -> AuditReport:
        """The handler's audit: from each job's watermark, each settled run judged once."""
        now, start = base.window_end, base.window_start
        states = marks.load(judged, now) if judged else {}
        pauses = {item.job: item.since for item in base.paused}
        per_job = max(READ_BUDGET // max(len(judged), 1), 1)
        findings = list(base.findings)
        walks: list[_Walk] = []
        expired = 0
        listings: dict[tuple[str, str, datetime], list[tuple[datetime, ...]]] = {}
        for schedule in judged:
            state = states[schedule.id]
            judged_to = None if state.mark is None else state.mark.judged_to
            begin = start if judged_to is None else max(start, judged_to)
            try:
                listed = _listed(listings, schedule, begin, now)
            except Exception as exc:  # croniter's errors have no common base
                reason = f"{type(exc).__name__}: {exc}"
                findings.append(_job_finding(schedule.id, Finding.UNAUDITABLE, reason))
                continue
            if judged_to is not None and judged_to < start:
                expired += _expired(schedule, judged_to, start, state.epoch)
            kept = () if state.mark is None else state.mark.open
            # An open run older than the look-back leaves it: shown until then, then dropped.
            reopened = [run for run in kept if run.instants[-1] > start]
            # Open runs are read again within the job's share too, oldest first; the
            # rest stay open as last judged, shown in the summary, read by a later audit.
            walk = _Walk(schedule, state.epoch, judged_to, reopened[:per_job])
            walk.carried = reopened[per_job:]
            walk.advance(listed, pauses, now, self._lease, per_job)
            walks.append(walk)
        keys = self._keys(
            [run for walk in walks for run in walk.new]
            + [ExpectedRun(walk.job, run.instants) for walk in walks for run in walk.reopened]
        )
        records = self._read_all(list(keys.values()))
        new_marks: dict[str, JobMark] = {}
        reported: dict[str, list[AuditFinding]] = {}
        still_open: dict[str, list[AuditFinding]] = {}
        skips = 0
        for walk in walks:
            job = walk.job
            keep: list[OpenRun] = []
            looked = [(ExpectedRun(job, run.instants), run.finding) for run in walk.reopened]
            looked += [(run, None) for run in walk.new]
            for run, before in looked:
                present = _present(run, records, keys, now)
                found = [record for _, record in present]
                finding = judge(run, found, now, self._lease)
                skips += before is None and skipped(found)
                if finding is None:
                    done = skipped(found) or any(r.status is Status.COMPLETED for r in found)
                    if not done:
                        keep.append(OpenRun(run.instants, None))  # a live lease: look again
                    continue
                keep.append(OpenRun(run.instants, finding.value))
                when = present[0][0] if present else run.schedule_time
                record = present[0][1] if present else None
                if finding.value == before:  # reported by an earlier audit: shown, not logged
                    identity = self.identity(job.id, when)
                    item = AuditFinding(job.id, when, finding, identity.key, record)
                    still_open.setdefault(job.id, []).append(item)
                else:
                    item = self._finding(job, when, finding, record, now)
                    reported.setdefault(job.id, []).append(item)
            for run in walk.carried:
                keep.append(run)
                if run.finding is not None:
                    when = run.instants[0]
                    identity = self.identity(job.id, when)
                    item = AuditFinding(job.id, when, Finding(run.finding), identity.key, None)
                    still_open.setdefault(job.id, []).append(item)
            keep.sort(key=lambda run: run.instants)
            mark = JobMark(
                job.schedule,
                job.time_zone,
                walk.epoch,
                walk.judged_to,
                tuple(keep[-MAX_OPEN_PER_JOB:]),
            )
            old = states[job.id].mark
            if mark != old:
                new_marks[job.id] = mark
        lost = marks.save(new_marks) if new_marks else set()
        # What a concurrent audit judged first is its to report: drop this audit's view of it.
        for job_id in lost:
            reported.pop(job_id, None)
            still_open.pop(job_id, None)
        return replace(
            base,
            findings=findings + [item for items in reported.values() for item in items],
            checked=sum(len(walk.new) + len(walk.reopened) for walk in walks),
            pending=sum(walk.pending for walk in walks),
            before_epoch=sum(walk.before_epoch for walk in walks),
            reads=marks.reads + len(keys),
            paused_runs=sum(walk.paused_runs for walk in walks),
            open=tuple(item for items in still_open.values() for item in items),
            deferred=sum(walk.deferred for walk in walks),
            expired=expired,
            skipped=skips,
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


class _Walk:
    """One job's way from its watermark: the runs this audit reads and where it stops."""

    def __init__(
        self,
        job: JobSchedule,
        epoch: datetime,
        judged_to: datetime | None,
        reopened: list[OpenRun],
    ) -> None:
        self.job = job
        self.epoch = epoch
        self.judged_to = judged_to
        self.reopened = reopened
        self.new: list[ExpectedRun] = []
        self.carried: list[OpenRun] = []  # open runs over the budget: kept unread
        self.pending = self.before_epoch = self.paused_runs = self.deferred = 0

    def advance(
        self,
        listed: Sequence[ExpectedRun],
        pauses: Mapping[str, datetime | None],
        now: datetime,
        lease: timedelta,
        budget: int,
    ) -> None:
        """Pass the settled runs in order, up to `budget` reads; the watermark ends at the last.

        Times before the epoch and paused times are passed without a read. The
        first run not yet settled, or over the budget, stops the watermark: it
        and every later run are looked at again by the next audit.
        """
        left = budget - sum(len(run.instants) for run in self.reopened)
        stopped = False
        for run in listed:
            before = run.schedule_time < self.epoch
            held = not before and _paused_at(run, pauses)
            settled = run.settles_at(lease) <= now
            needs = 0 if before or held else len(run.instants)
            stopped = stopped or not settled or (needs > 0 and needs > max(left, 0))
            if before:
                self.before_epoch += 1
            elif held:
                self.paused_runs += 1
            elif not settled:
                self.pending += 1
            elif stopped:
                self.deferred += 1
            else:
                self.new.append(run)
                left -= needs
            if not stopped:
                self.judged_to = run.instants[-1]


def _listed(
    listings: dict[tuple[str, str, datetime], list[tuple[datetime, ...]]],
    job: JobSchedule,
    begin: datetime,
    end: datetime,
) -> list[ExpectedRun]:
    """`job`'s times in (begin, end], listed once per schedule, zone and start in one audit.

    Jobs on one cron line judged to one instant (the usual steady state) share
    the listing, which is most of an audit's CPU otherwise.
    """
    key = (job.schedule, job.time_zone, begin)
    if key not in listings:
        listings[key] = [run.instants for run in schedule_times(job, begin, end)]
    return [ExpectedRun(job, instants) for instants in listings[key]]


def _expired(job: JobSchedule, judged_to: datetime, start: datetime, epoch: datetime) -> int:
    """The job's times after its watermark that left the look-back before an audit judged them."""
    try:
        listed = schedule_times(job, judged_to, start)
    except Exception:  # croniter's errors have no common base; the listing after says why
        return 0
    return sum(1 for run in listed if run.schedule_time >= epoch and run.instants[-1] <= start)


def _present(
    run: ExpectedRun,
    records: Mapping[str, RunRecord],
    keys: Mapping[tuple[str, datetime], str],
    now: datetime,
) -> list[tuple[datetime, RunRecord]]:
    """The run's unexpired records, by the instant each was stamped with."""
    return [
        (instant, records[keys[run.job.id, instant]])
        for instant in run.instants
        if keys[run.job.id, instant] in records
        # past expire_at a record is as good as absent (TTL deletion is lazy)
        and not records[keys[run.job.id, instant]].is_expired(now)
    ]


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


# Still-open findings the summary line lists by name (all are counted in `open`).
OPEN_SHOWN = 50

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
        "WARNING" if report.findings or report.open or report.expired else "INFO",
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
        skipped=report.skipped,
        open=len(report.open),
        open_findings=[_open_entry(item) for item in report.open[:OPEN_SHOWN]],
        deferred=report.deferred,
        expired=report.expired,
        scheduler_read=report.scheduler_unread is None,
        scheduler_unread=report.scheduler_unread,
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
    return f"{text}; {report.job_states}"


def install_audit(app: App, settings: AuditSettings, live: Lister | None = None) -> None:
    """Serve the reserved audit job id from `app`, claimed and deduplicated like any run.

    It audits from the watermarks (`runledger.watermarks`): each settled run read once.

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
            catch_up=catch_up,
            live=live,
            marks=app.ledger.audit_marks(settings.project, settings.region),
        )
        log_report(audit.run(), job=settings.job)

    app.jobs = {**app.jobs, settings.job: audit_job}
