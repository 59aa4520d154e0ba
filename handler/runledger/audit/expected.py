"""Which scheduled times each job should have had: the audit's expected runs.

From each job's unix-cron schedule and time zone this lists the schedule times
in a window, resolving daylight-saving changes the way Cloud Scheduler's wall
clock does, and refuses a listing larger than one audit may read. It reads
nothing: the audit (`runledger.audit.runner`) holds these times against the ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from zoneinfo import ZoneInfo

from runledger.audit.wall_times import WallTimes
from runledger.facts import OVERLAP_DELAY
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.schedules import JobSchedule

# Reads one audit may make. At one read per expected run this is, e.g., 100
# jobs every 5 minutes over 6 hours (7,200) with room to spare.
MAX_READS = 20_000
# A daylight-saving change moves local time by at most 2 hours (tz database);
# scanning local wall-clock time this much beyond the window catches every
# schedule time that falls inside it.
_MAX_OFFSET_CHANGE = timedelta(hours=3)
# Less than any two schedule times apart: (start - _TINY, ...] includes start itself.
_TINY = timedelta(microseconds=1)


class AuditTooLarge(Exception):
    """The audit would read more than MAX_READS documents; narrow the window or the jobs."""


@dataclass(frozen=True)
class ExpectedRun:
    """One scheduled time of one job, with the instant(s) Scheduler may stamp it with."""

    job: JobSchedule
    instants: tuple[datetime, ...]  # one, or two for a wall time that occurs twice

    @property
    def schedule_time(self) -> datetime:
        return self.instants[0]

    def settles_at(self, lease: timedelta) -> datetime:
        return self.retries_end + lease + MAX_CLOCK_SKEW

    @cached_property
    def retries_end(self) -> datetime:
        """When Scheduler is done retrying this time: the end of its job's retry window.

        Retries run "retry_count times, or until the next scheduled execution time,
        whichever comes first" (Cloud Scheduler RetryConfig). An `overlap: delay`
        job's delayed time waits in those retries, so for such a job the window ends
        at the next scheduled time when that comes first: a time whose retries ran out
        there is judged then, not a whole retry window later (docs/work.md).
        """
        end = self.instants[-1] + self.job.retry_window
        if self.job.overlap != OVERLAP_DELAY:
            return end
        following = schedule_instants(self.job.schedule, self.job.zone, self.instants[-1], end)
        return min(end, following[0][0]) if following else end


def _instants(wall: datetime, zone: ZoneInfo) -> tuple[datetime, ...]:
    """The UTC instants a local wall-clock time denotes: none, one, or two.

    Cloud Scheduler "runs on wall clock time", and its documentation ("Configure
    cron job schedules", Time zone) warns that daylight saving "can cause jobs to
    run or not run unexpectedly": a wall time the clocks skip has no instant, so
    no run is expected then; a wall time that occurs twice "may observe execution
    anomalies", so one run is expected and a record at either instant counts.
    croniter 7 given a zone-aware start differs on both days: it moves a skipped
    time to the end of the gap (02:30 becomes 03:00) and yields a repeated time
    twice, as two runs. So croniter only matches naive wall-clock times here,
    and this function resolves them to instants.
    """
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first == second:
        return (first,)
    if first.astimezone(zone).replace(tzinfo=None) != wall:
        return ()  # the clocks skipped this wall time
    return (min(first, second), max(first, second))


# croniter's matches, kept per process: audits list nearly the same spans again.
_WALLS = WallTimes(_instants)


def _scan_margin(zone: ZoneInfo, start: datetime, end: datetime) -> timedelta:
    """How far beyond the window to scan local time: none where one UTC offset holds throughout.

    Time zones change offset at most a few times a year, never twice within
    days, so one offset at both ends of a window of at most a day, and
    `_MAX_OFFSET_CHANGE` beyond them, holds in between: local time is then a
    fixed shift of UTC and the window's own wall times are exactly its runs.
    The audit's short windows from a watermark are such windows; scanning
    hours beyond them for every job was most of an audit's CPU.
    """
    if end - start <= timedelta(days=1):
        probes = (start - _MAX_OFFSET_CHANGE, start, end, end + _MAX_OFFSET_CHANGE)
        if len({probe.astimezone(zone).utcoffset() for probe in probes}) == 1:
            return timedelta(0)
    return _MAX_OFFSET_CHANGE


def schedule_instants(
    schedule: str, zone: ZoneInfo, start: datetime, end: datetime
) -> list[tuple[datetime, ...]]:
    """The times a unix-cron `schedule` in `zone` fires in (start, end], oldest first.

    Each as the instant(s) it may be stamped with (`_instants`): a wall time the
    clocks skip is not listed, one they repeat is listed once with both. The
    audit's expected runs and the local demo's Scheduler (`scheduler_dedup.localrun.simulator`)
    both come from here, so they agree on daylight-saving days.
    """
    margin = _scan_margin(zone, start, end)
    first = start.astimezone(zone).replace(tzinfo=None) - margin
    last = end.astimezone(zone).replace(tzinfo=None) + margin
    listed: list[tuple[datetime, ...]] = []
    for _, instants in _WALLS.between(schedule, zone, first, last):
        # A repeated wall time belongs to the window while its later instant does: it
        # settles from that one, so a window just long enough for other runs judges it too.
        if instants and start < instants[-1] and instants[0] <= end:
            listed.append(instants)
    return listed


def schedule_times(job: JobSchedule, start: datetime, end: datetime) -> list[ExpectedRun]:
    """`job`'s scheduled times in (start, end], oldest first (a repeated one by either instant).

    Only the times in the job's active window (`startAt`/`endAt`): the others are never
    expected, so never missed nor caught up, nor backfilled, nor shown as next.
    """
    if job.start_at is not None:
        if end < job.start_at:
            return []
        start = max(start, job.start_at - _TINY)
    # A wall time the clocks repeat is in the window by its first instant, and listed by
    # its last: so the listing's end stays, and only a start past every such time is empty.
    if job.end_at is not None:
        if start >= job.end_at + _MAX_OFFSET_CHANGE:
            return []
        end = min(end, job.end_at + _MAX_OFFSET_CHANGE)  # no later time is in the window
    return [
        ExpectedRun(job, instants)
        for instants in schedule_instants(job.schedule, job.zone, start, end)
        if job.in_window(instants[0])
    ]


def _in_window(job: JobSchedule, start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """(start, end] narrowed to the job's active window (its bounds inclusive), by first instants.

    For a lower bound on the times in it only: a repeated wall time whose first instant
    is inside may be listed by a later one (`schedule_times`).
    """
    if job.start_at is not None:
        start = max(start, job.start_at - _TINY)
    if job.end_at is not None:
        end = min(end, job.end_at)
    return start, end


def least_schedule_times(job: JobSchedule, start: datetime, end: datetime) -> int:
    """A lower bound on `job`'s schedule times in (start, end], from the cron fields alone.

    Only schedules that fire on every day of the month in every month get a
    bound above 0: every hour of every day (m fires an hour), or some hours
    on some weekdays (m x hours x weekdays a week). One hour is lost to the
    window's partial hours at its ends, and `_MAX_OFFSET_CHANGE` to a
    daylight-saving change (skipped wall times are no runs, repeated ones one).
    """
    from croniter import croniter  # only the audit lists times: off a delivery's imports

    start, end = _in_window(job, start, end)
    if end <= start:
        return 0
    minutes, hours, days, months, weekdays = croniter(job.schedule).expanded
    if days != ["*"] or months != ["*"]:
        return 0
    hour = timedelta(hours=1)
    per_hour = 60 if minutes == ["*"] else len(minutes)
    per_day = (24 if hours == ["*"] else len(hours)) * per_hour
    days_a_week = 7 if weekdays == ["*"] else len({int(day) % 7 for day in weekdays})
    clock_change = int(_MAX_OFFSET_CHANGE / hour) * per_hour
    if per_day == 24 * per_hour and days_a_week == 7:
        return max(((end - start) // hour - 1) * per_hour - clock_change, 0)
    weeks = (end - start) // timedelta(weeks=1)
    return max(weeks * (days_a_week * per_day - clock_change), 0)


def _too_large(schedules: Sequence[JobSchedule], start: datetime, end: datetime) -> AuditTooLarge:
    return AuditTooLarge(
        f"auditing {len(schedules)} job(s) over {end - start} needs more than "
        f"{MAX_READS} reads (one per scheduled time); narrow the window or the jobs"
    )


def listed_runs(
    schedules: Sequence[JobSchedule], start: datetime, end: datetime
) -> tuple[list[ExpectedRun], dict[str, str]]:
    """Like `expected_runs`, but a job whose times cannot be listed is set apart, not fatal.

    Returns the runs of the jobs that could be listed and, per job that could not,
    why (one line): the audit reports that job `unauditable` and audits the others.
    """
    failures: dict[str, str] = {}
    listable: list[JobSchedule] = []
    for job in schedules:
        try:
            least_schedule_times(job, start, end)
        except Exception as exc:  # croniter's errors have no common base
            failures[job.id] = f"{type(exc).__name__}: {exc}"
        else:
            listable.append(job)
    runs = expected_runs(listable, start, end, failures)
    return runs, failures


def expected_runs(
    schedules: Sequence[JobSchedule],
    start: datetime,
    end: datetime,
    failures: dict[str, str] | None = None,
) -> list[ExpectedRun]:
    """Every job's schedule times in (start, end]; AuditTooLarge past MAX_READS.

    Listing them costs CPU (croniter), so an audit whose lower bound already
    exceeds the cap is refused before listing any. With `failures` given, a job
    whose times cannot be listed is recorded there (job id: why) and skipped.
    """
    if sum(least_schedule_times(job, start, end) for job in schedules) > MAX_READS:
        raise _too_large(schedules, start, end)
    runs: list[ExpectedRun] = []
    for job in schedules:
        if failures is None:
            runs.extend(schedule_times(job, start, end))
        else:
            try:
                runs.extend(schedule_times(job, start, end))
            except Exception as exc:  # croniter's errors have no common base
                failures[job.id] = f"{type(exc).__name__}: {exc}"
        if sum(len(run.instants) for run in runs) > MAX_READS:
            raise _too_large(schedules, start, end)
    return runs


def repeated_s(zone: str) -> int:
    """How long a daylight-saving change of `zone` repeats the clocks, in seconds (0: none).

    The difference of its UTC offsets half a year apart, which covers either hemisphere.
    A wall time the clocks repeat is one run, recorded from its first instant and settled
    from its last, so the audit's look-back must span this too.
    """
    tz = ZoneInfo(zone)
    offsets = [datetime(2026, month, 1, tzinfo=tz).utcoffset() or timedelta(0) for month in (1, 7)]
    return int(abs((offsets[0] - offsets[1]).total_seconds()))
