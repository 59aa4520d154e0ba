"""The audit: every scheduled time of every job, held against the ledger.

It takes each job's schedule times in a look-back window from
`runledger.audit.expected` (daylight saving included), computes each run's key
exactly as a delivery would (`delivery.run_key`: project, region, job, time,
"scheduled"), and reads those
documents by key in batches. No query and no index: the only permission it
needs is the `datastore.entities.get` the handler already has. Forced runs have
keys of their own ("manual"), so they are never taken for expected runs.

Only schedule times at or after the job's epoch count (`runledger.ledger.epochs`: when
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
    skipped (ledger.overlap)         -> deliberately not run: counted in the summary

Before that, each job's live state comes from Cloud Scheduler, one listing per
audit with each job's pauses and resumes from Scheduler's audit log
(`runledger.audit.scheduler_state`), and each time's state from that evidence
(`runledger.audit.pauses`). Per job:

    paused live but not in the stack, or the other way round; live schedule or
    time zone differs from DEDUP_SCHEDULES; or not in Scheduler
                     -> one finding `drifted` for the job, its runs not judged
    so in some regions' Scheduler only (DEDUP_REGIONS; `runledger.audit.regions`)
                     -> one finding `drifted` naming them, its runs judged
    times cannot be listed (croniter fails)
                     -> one finding `unauditable` for the job; the others are audited
    its pause log disagrees with a sighting older than `pauses.PAUSE_LOG_LAG`
                     -> one finding `pause_log_disagrees`; its times' state is unknown

and per time: paused (evidence shows it) -> deliberately not run, neither
judged nor caught up; pending (a call the log may not show yet) -> left for a
later audit, as a time not settled; state unknown -> judged, a missed one
reported with the reason and not caught up; enabled -> judged as above.

Two ways to run. The handler's audit (`service.audit_job`) goes from each job's
watermark (`runledger.ledger.watermarks`): it reads the watermark shards (at most one
document per job), the runs settled since, and the runs still open, so each
settled run is read once and each finding logged once (its line goes out before
the watermark write: again only if that write never lands, or loses a race);
findings still open are carried in the summary (`open`, `open_findings`). It
reads at most READ_BUDGET runs; the rest wait behind the watermark for the next
audit. The operator CLI
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
from dataclasses import replace
from datetime import datetime, timedelta

from runledger.audit.expected import ExpectedRun, listed_runs
from runledger.audit.findings import (
    AuditFinding,
    AuditReport,
    Finding,
    PausedJob,
    judge,
    not_run,
    rfc3339,
    suspended,
)
from runledger.audit.pauses import (
    State,
    Timeline,
    edited,
    paused_at,
    pending_at,
    sighting,
    timelines,
    weighed,
)
from runledger.audit.regions import by_region
from runledger.audit.scheduler_state import Lister, LiveJob, drift, history_unread
from runledger.audit.suspensions import SuspensionAccess
from runledger.audit.suspensions import detail as suspension_detail
from runledger.audit.walk import Walk, expired_times, in_window, listed_once, present_records
from runledger.delivery.identify import run_key
from runledger.exceptions import SchedulerAbsent, SchedulerUnreadable
from runledger.ledger.overlap import skipped
from runledger.ledger.record import RunRecord, Status
from runledger.ledger.run import RunIdentity
from runledger.ledger.suspension import Suspension
from runledger.ledger.watermarks import (
    MAX_OPEN_PER_JOB,
    JobMark,
    JobState,
    LedgerMarks,
    OpenRun,
)
from runledger.schedules import AuditSettings, JobSchedule

# Keys per batch read: one BatchGetDocuments call each.
BATCH = 300
# Run documents the handler's audit reads at most, shared evenly by its jobs
# (at least one run each); settled runs beyond a job's share wait, unjudged and
# behind its watermark, for the next audit. 5,000 jobs every 5 minutes need 6
# reads a job per 30-minute audit; their share is 10, so a backlog drains too.
READ_BUDGET = 50_000

# What a pause log that disagrees with the live state means for the job's runs.
_CONFLICT_TAIL = (
    "a pause or resume is missing from the log (its filter, or ingestion lag), so its "
    "times' state is unknown: missed runs reported, not caught up"
)

# The findings the audit's catch-up redoes (a stale run through the takeover rule).
_CAUGHT_UP = (Finding.MISSED, Finding.STALE, Finding.RELEASED)


Reader = Callable[[Sequence[str]], Mapping[str, RunRecord]]
# Each audited job's epoch at the audit's `now`; a job left out is judged over the whole window.
Epochs = Callable[[Sequence[JobSchedule], datetime], Mapping[str, datetime]]


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
        emit: Callable[[Sequence[AuditFinding]], None] | None = None,
        suspensions: SuspensionAccess | None = None,
    ) -> None:
        """`epochs` (judge the whole look-back), or `marks` and `emit` (logs the findings).

        `suspensions`: the jobs' suspensions (`audit.suspensions`; None: not read)."""
        if (epochs is None) == (marks is None) or (marks is None) != (emit is None):
            raise TypeError("Audit takes epochs, or marks with emit")
        self._settings = settings
        self._lease = lease
        self._read = read
        self._clock = clock
        self._epochs = epochs
        self._marks = marks
        self._emit = emit
        self._catch_up = catch_up
        self._live = live
        self._suspensions = suspensions
        # Each job's state over this audit's window (`audit.pauses`), set by `run`.
        self._lines: dict[str, Timeline] = {}

    def identity(self, job: str, schedule_time: datetime) -> RunIdentity:
        """The scheduled (not forced) run of `job` at `schedule_time`, keyed as its delivery is."""
        project, region = self._settings.project, self._settings.region
        key = run_key(job, schedule_time, project, region, manual=False)
        return RunIdentity(key, job, schedule_time, project, region, manual=False)

    def _live_jobs(self, since: datetime) -> tuple[Mapping[str, LiveJob] | None, str | None, bool]:
        """The live jobs by id, or None and why Scheduler was not read, and whether it is absent."""
        if self._live is None:
            return None, "no lister", True
        try:
            return self._live(since), None, False
        except SchedulerAbsent as exc:
            return None, str(exc), True
        except SchedulerUnreadable as exc:
            return None, str(exc), False

    def run(self, lookback: timedelta | None = None, job: str | None = None) -> AuditReport:
        now = self._clock()
        start = now - (lookback or self._settings.lookback)
        schedules = [s for s in self._settings.schedules if job is None or s.id == job]
        live, unread, absent = self._live_jobs(start) if schedules else (None, None, True)
        live, regional = by_region(schedules, live)
        findings: list[AuditFinding] = []
        judged: list[JobSchedule] = []
        for schedule in schedules:
            spread = regional.get(schedule.id)
            differs = spread.reason if spread is not None else drift(schedule, live)
            if differs:
                findings.append(_job_finding(schedule.id, Finding.DRIFTED, differs))
            if not differs or (spread is not None and spread.judged):
                judged.append(schedule)
        self._lines = timelines(schedules, live, unread, absent)
        states = {}
        if self._marks is not None and judged:
            # A rescheduled job is judged from when Scheduler is seen to have it.
            seen = None if live is not None or absent else frozenset[str]()
            states = self._marks.load(judged, now, seen)
            judged = [schedule for schedule in judged if schedule.id in states]
            for schedule in judged:
                mark = states[schedule.id].mark
                seen = None if mark is None else mark.seen
                state = None if live is None else live.get(schedule.id)
                if state is not None:
                    line = weighed(state, seen, now)
                    epoch = states[schedule.id].epoch
                    self._lines[schedule.id] = edited(line, state, seen, epoch, now)
        for schedule in judged:
            conflict = self._lines[schedule.id].conflict
            if conflict:
                detail = f"{conflict}: {_CONFLICT_TAIL}"
                findings.append(_job_finding(schedule.id, Finding.PAUSE_LOG_DISAGREES, detail))
        paused = [
            PausedJob(schedule.id, self._lines[schedule.id].paused_since)
            for schedule in judged
            if self._lines[schedule.id].at(now) is State.PAUSED
        ]
        on_hold = self._held(judged)
        findings += [
            _job_finding(job, Finding.SUSPENDED, suspension_detail(state))
            for job, state in on_hold.items()
            if self._marks is None or state.reported_at is None
        ]
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
            scheduler_absent=absent,
            history_unread=history_unread(schedules, live),
            suspended=tuple((job, suspension_detail(state)) for job, state in on_hold.items()),
        )
        if self._marks is not None:
            assert self._emit is not None  # given with marks, checked on construction
            report = self._run_marked(self._marks, self._emit, base, judged, states, live)
            self._settle_suspensions(on_hold, report)
            return report
        assert self._epochs is not None  # one of the two, checked on construction
        listed, failures = listed_runs(judged, start, now)  # refuses an audit too large, unread
        for job_id, reason in failures.items():
            findings.append(_job_finding(job_id, Finding.UNAUDITABLE, reason))
        epochs = self._epochs(judged, now) if judged else {}
        runs = [
            run
            for run in listed
            if run.schedule_time >= epochs.get(run.job.id, start) and in_window(run, start)
        ]
        held = [run for run in runs if paused_at(run, self._lines)]
        runs = [run for run in runs if not paused_at(run, self._lines)]
        settled = [run for run in runs if run.settles_at(self._lease) <= now]
        keys = self._keys(settled)
        records = self._read_all(list(keys.values()))
        skips = held_runs = 0
        for run in settled:
            present = present_records(run, records, keys, now)
            skips += skipped([record for _, record in present])
            held_runs += suspended([record for _, record in present])
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
            suspended_runs=held_runs,
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
        self,
        marks: LedgerMarks,
        emit: Callable[[Sequence[AuditFinding]], None],
        base: AuditReport,
        judged: Sequence[JobSchedule],
        states: Mapping[str, JobState],
        live: Mapping[str, LiveJob] | None,
    ) -> AuditReport:
        """The handler's audit: from each job's watermark, each settled run judged once."""
        now, start = base.window_end, base.window_start
        per_job = max(READ_BUDGET // max(len(judged), 1), 1)
        findings = list(base.findings)
        walks: list[Walk] = []
        expired = 0
        listings: dict[tuple[str, str, datetime], list[tuple[datetime, ...]]] = {}
        for schedule in judged:
            state = states[schedule.id]
            judged_to = None if state.mark is None else state.mark.judged_to
            begin = start if judged_to is None else max(start, judged_to)
            try:
                listed = [
                    r for r in listed_once(listings, schedule, begin, now) if in_window(r, start)
                ]
            except Exception as exc:  # croniter's errors have no common base
                reason = f"{type(exc).__name__}: {exc}"
                findings.append(_job_finding(schedule.id, Finding.UNAUDITABLE, reason))
                continue
            if judged_to is not None and judged_to < start:
                gone = expired_times(schedule, judged_to, start, state.epoch)
                expired += len(gone)
                if gone:
                    findings.append(_unjudged(schedule.id, gone, start))
            kept = () if state.mark is None else state.mark.open
            # An open run older than the look-back leaves it: shown until then, then dropped.
            # One that evidence now shows paused was deliberately not run: dropped too.
            reopened = [
                run
                for run in kept
                if in_window(ExpectedRun(schedule, run.instants), start)
                and not paused_at(ExpectedRun(schedule, run.instants), self._lines)
            ]
            # Open runs are read again within the job's share too, oldest first; the
            # rest stay open as last judged, shown in the summary, read by a later audit,
            # as do those whose job's state then is pending (never caught up on a guess).
            waiting = [
                run
                for run in reopened
                if pending_at(ExpectedRun(schedule, run.instants), self._lines)
            ]
            reopened = [run for run in reopened if run not in waiting]
            walk = Walk(schedule, state.epoch, judged_to, reopened[:per_job])
            walk.carried = waiting + reopened[per_job:]
            walk.advance(listed, self._lines, now, self._lease, per_job)
            walks.append(walk)
        keys = self._keys(
            [run for walk in walks for run in walk.new]
            + [ExpectedRun(walk.job, run.instants) for walk in walks for run in walk.reopened]
        )
        records = self._read_all(list(keys.values()))
        new_marks: dict[str, JobMark] = {}
        reported: dict[str, list[AuditFinding]] = {}
        still_open: dict[str, list[AuditFinding]] = {}
        skips = held_runs = 0
        for walk in walks:
            job = walk.job
            keep: list[OpenRun] = []
            looked = [(ExpectedRun(job, run.instants), run.finding) for run in walk.reopened]
            looked += [(run, None) for run in walk.new]
            for run, before in looked:
                present = present_records(run, records, keys, now)
                found = [record for _, record in present]
                finding = judge(run, found, now, self._lease)
                skips += before is None and skipped(found)
                held_runs += before is None and suspended(found)
                if finding is None:
                    done = not_run(found) or any(r.status is Status.COMPLETED for r in found)
                    if not done:
                        keep.append(OpenRun(run.instants, None))  # a live lease: look again
                    continue
                when = present[0][0] if present else run.schedule_time
                record = present[0][1] if present else None
                if finding.value == before:  # reported by an earlier audit: shown, not logged
                    # Still missed: its catch-up recorded nothing (a running run, the store).
                    again = self._finding(job, when, finding, record, now, (Finding.MISSED,))
                    still_open.setdefault(job.id, []).append(again)
                    keep.append(OpenRun(run.instants, finding.value))
                    continue
                item = self._finding(job, when, finding, record, now)
                reported.setdefault(job.id, []).append(item)
                # A released run caught up is judged afresh by the next audit: released
                # again after its catch-up failed (`ops release`), it is reported and caught
                # up again, not taken as the release already reported (seed 275).
                again = item.finding is Finding.RELEASED and item.catch_up is not None
                keep.append(OpenRun(run.instants, None if again else finding.value))
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
                sighting(live, job.id, now, states[job.id].mark),
            )
            old = states[job.id].mark
            if mark != old:
                new_marks[job.id] = mark
        findings += [item for items in reported.values() for item in items]
        emit(findings)  # before the watermarks move past them: a crash after loses none
        lost = marks.save(new_marks) if new_marks else set()
        # A concurrent audit won those jobs' shard: the runs it keeps open are its to show.
        for job_id in lost:
            still_open.pop(job_id, None)
        return replace(
            base,
            findings=findings,
            checked=sum(len(walk.new) + len(walk.reopened) for walk in walks),
            pending=sum(walk.pending for walk in walks),
            before_epoch=sum(walk.before_epoch for walk in walks),
            reads=marks.reads + len(keys),
            paused_runs=sum(walk.paused_runs for walk in walks),
            open=tuple(item for items in still_open.values() for item in items),
            deferred=sum(walk.deferred for walk in walks),
            awaiting_log=sum(walk.awaiting_log for walk in walks),
            expired=expired,
            skipped=skips,
            suspended_runs=held_runs,
        )

    def _held(self, judged: Sequence[JobSchedule]) -> dict[str, Suspension]:
        """The suspended jobs among `judged` that count failures, by id (one read each)."""
        gated = [schedule for schedule in judged if schedule.suspend_after is not None]
        if self._suspensions is None or not gated:
            return {}
        found = self._suspensions.read(gated)
        return {job: state for job, state in found.items() if state.suspended}

    def _settle_suspensions(self, held: Mapping[str, Suspension], report: AuditReport) -> None:
        """After the finding lines went out: mark new suspensions reported, count failures.

        A failure counted may suspend a job; the next audit logs that suspension's finding.
        """
        access = self._suspensions
        if access is None:
            return
        if access.mark is not None:
            for job, state in held.items():
                if state.reported_at is None:
                    access.mark(job, state)
        if access.count is None:
            return
        thresholds = {s.id: s.suspend_after for s in self._settings.schedules}
        for item in report.findings:
            threshold = thresholds.get(item.job)
            if threshold is None or item.schedule_time is None:
                continue
            if item.finding in (Finding.FAILED, Finding.RELEASED) and item.catch_up is None:
                error = None if item.record is None else item.record.error
                access.count(self.identity(item.job, item.schedule_time), threshold, error)

    def _finding(
        self,
        job: JobSchedule,
        schedule_time: datetime,
        finding: Finding,
        record: RunRecord | None,
        now: datetime,
        caught: tuple[Finding, ...] = _CAUGHT_UP,  # the findings caught up (if the job opts in)
    ) -> AuditFinding:
        identity = self.identity(job.id, schedule_time)
        line = self._lines.get(job.id)
        if (
            finding is Finding.MISSED
            and line is not None
            and line.at(schedule_time) is State.UNKNOWN
        ):
            # Nothing shows the job was meant to run then: reported, never caught up.
            detail = f"job state unknown ({line.why_at(schedule_time)}): not caught up"
            return AuditFinding(job.id, schedule_time, finding, identity.key, record, detail=detail)
        catch_up = None
        if (
            self._catch_up is not None
            and job.catch_up
            and finding in caught
            and now - schedule_time <= job.catch_up_max_age
        ):
            catch_up = self._catch_up(identity)
        return AuditFinding(job.id, schedule_time, finding, identity.key, record, catch_up)


def _unjudged(job: str, gone: Sequence[datetime], start: datetime) -> AuditFinding:
    """One finding for the job's times that left the look-back (`start`) unjudged."""
    detail = (
        f"{len(gone)} scheduled run(s) from {rfc3339(gone[0])} to {rfc3339(gone[-1])} left "
        f"the look-back (it now starts at {rfc3339(start)}) before any audit judged them: "
        "whether they ran is not known here (their records may be gone by TTL)"
    )
    return AuditFinding(
        job, None, Finding.UNJUDGED, None, None, detail=detail, span=(gone[0], gone[-1])
    )


def _job_finding(job: str, finding: Finding, detail: str) -> AuditFinding:
    return AuditFinding(job, None, finding, None, None, detail=detail)
