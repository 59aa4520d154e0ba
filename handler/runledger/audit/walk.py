"""The handler's audit walks each job from its watermark: which runs it reads, where it stops."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from runledger.audit.expected import ExpectedRun, schedule_times
from runledger.audit.pauses import Timeline, paused_at, pending_at
from runledger.ledger.record import RunRecord
from runledger.ledger.watermarks import OpenRun
from runledger.schedules import JobSchedule


class Walk:
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
        pauses: Mapping[str, Timeline],
        now: datetime,
        lease: timedelta,
        budget: int,
    ) -> None:
        """Pass the settled runs in order, up to `budget` reads; the watermark ends at the last.

        Times before the epoch and times evidence shows paused are passed without a read. The
        first run not yet settled (or whose state's evidence is still pending), or over the
        budget, stops the watermark: it
        and every later run are looked at again by the next audit.
        """
        left = budget - sum(len(run.instants) for run in self.reopened)
        stopped = False
        for run in listed:
            before = run.schedule_time < self.epoch
            held = not before and paused_at(run, pauses)
            settled = run.settles_at(lease) <= now and not pending_at(run, pauses)
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


def listed_once(
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
    if job.windowed:  # its own listing: the window narrows it (`expected.schedule_times`)
        return schedule_times(job, begin, end)
    if key not in listings:
        listings[key] = [run.instants for run in schedule_times(job, begin, end)]
    return [ExpectedRun(job, instants) for instants in listings[key]]


def in_window(run: ExpectedRun, start: datetime) -> bool:
    """Whether `run` is inside a look-back that begins at `start`: by its first instant.

    A wall time the clocks repeat is one run, recorded under its first instant and
    expiring from it, so once that instant has left the look-back its record may be
    gone, and reading it as absent would report a run that ran (the simulator's seed 21:
    a TTL deletion, then the look-back judged again). The program's shortest look-back
    spans a repeated hour, so an earlier audit judged it in time.
    """
    return run.instants[0] > start


def expired_times(
    job: JobSchedule, judged_to: datetime, start: datetime, epoch: datetime
) -> list[datetime]:
    """The job's times after its watermark that left the look-back before an audit judged them."""
    try:
        listed = schedule_times(job, judged_to, start)
    except Exception:  # croniter's errors have no common base; the listing after says why
        return []
    return [
        run.schedule_time
        for run in listed
        if run.schedule_time >= epoch and run.instants[-1] <= start
    ]


def present_records(
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
