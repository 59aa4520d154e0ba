"""Advice on Cloud Scheduler jobs whose local-time schedule fires inside a daylight-saving change.

Cloud Scheduler runs a job "on wall clock time" in its `timeZone`; Google's
"Cron job format and time zone" page (Time zone section,
https://cloud.google.com/scheduler/docs/configuring/cron-job-schedules) warns
that daylight saving can make jobs run or not run unexpectedly and that a job
scheduled in the repeated or skipped hour "may observe execution anomalies".
So a schedule with a time the clocks skip in spring (`30 2 * * *` in
Europe/Berlin) gets no run that night, and one with a time they repeat in
autumn may run twice. The handler keys both occurrences of a repeated wall
time as one run and the audit expects no run for a skipped one, so nothing is
reported twice or missed in silence, but the job's owner should know which
night it does not run. The rule names the job, the zone and the next dates,
and suggests UTC or a local time outside the change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from dedup_policies import types
from dedup_policies.facts import cron_matches, schedule_problem
from dedup_policies.props import get_path

# How far ahead transitions are looked for: a year holds a zone's spring and autumn change.
_AHEAD = timedelta(days=400)
_STEP = timedelta(hours=6)  # zones change offset at most a few times a year, never within hours
_MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Transition:
    """One change of a zone's UTC offset, as local wall-clock times."""

    at: datetime  # the UTC instant the new offset starts
    start: datetime  # first local wall time skipped or repeated (naive)
    end: datetime  # first local wall time after them (naive)
    skipped: bool  # True: clocks jump forward (spring); False: they repeat (autumn)


def transitions(zone: ZoneInfo, now: datetime, ahead: timedelta = _AHEAD) -> list[Transition]:
    """The zone's offset changes from `now` on, found by stepping and narrowing to the minute."""
    found: list[Transition] = []
    moment = now.astimezone(UTC).replace(second=0, microsecond=0)
    last = moment + ahead
    while moment < last:
        later = moment + _STEP
        before, after = moment.astimezone(zone).utcoffset(), later.astimezone(zone).utcoffset()
        if before != after and before is not None and after is not None:
            low, high = moment, later  # offset `before` at low, `after` at high
            while high - low > _MINUTE:
                middle = low + (high - low) // _MINUTE // 2 * _MINUTE  # whole minutes
                if middle.astimezone(zone).utcoffset() == before:
                    low = middle
                else:
                    high = middle
            wall_before = (high + before).replace(tzinfo=None)
            wall_after = (high + after).replace(tzinfo=None)
            found.append(
                Transition(
                    high,
                    min(wall_before, wall_after),
                    max(wall_before, wall_after),
                    skipped=after > before,
                )
            )
        moment = later
    return found


def fires_in(schedule: str, transition: Transition) -> datetime | None:
    """The first wall-clock minute of the change the schedule fires at; None if none."""
    wall = transition.start
    while wall < transition.end:
        if cron_matches(schedule, wall):
            return wall
        wall += _MINUTE
    return None


def advice(job: str, schedule: str, time_zone: str, now: datetime) -> str | None:
    """The rule's message for one job, or None when its schedule stays clear of the changes."""
    if schedule_problem(schedule):
        return None  # the unix-cron rule reports it
    try:
        zone = ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    hits = [
        (change, wall)
        for change in transitions(zone, now)
        if (wall := fires_in(schedule, change)) is not None
    ]
    if not hits:
        return None
    dates = "; ".join(
        f"{wall:%Y-%m-%d %H:%M} "
        + (
            f"is skipped (clocks jump from {change.start:%H:%M} to {change.end:%H:%M}): "
            "no run that night"
            if change.skipped
            else f"occurs twice (clocks go back from {change.end:%H:%M} to "
            f"{change.start:%H:%M}): Scheduler may run it twice"
        )
        for change, wall in hits
    )
    hours = sorted({f"{change.start:%H:%M}-{change.end:%H:%M}" for change, _ in hits})
    return (
        f"Job {job!r} runs on local time in {time_zone}, and its schedule {schedule!r} fires "
        f"inside a daylight-saving change: {dates}. Cloud Scheduler calls such runs "
        '"execution anomalies" ("Cron job format and time zone"). Schedule it in UTC, or at '
        f"a local time outside {', '.join(hours)}."
    )


def _daylight_saving(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != types.SCHEDULER_JOB:
        return
    schedule = get_path(args.props, "schedule")
    time_zone = get_path(args.props, "timeZone")
    if not isinstance(schedule, str) or not isinstance(time_zone, str):
        return  # no schedule is the unix-cron rule's; no time zone is UTC (Job.timeZone)
    job = get_path(args.props, "name")
    message = advice(job if isinstance(job, str) else args.name, schedule, time_zone, _now())
    if message:
        report(message, None)


def _now() -> datetime:
    return datetime.now(UTC)


scheduler_daylight_saving = ResourceValidationPolicy(
    name="scheduler-daylight-saving",
    description="Cloud Scheduler jobs on local time do not fire in a daylight-saving change.",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=_daylight_saving,
)

POLICIES = [scheduler_daylight_saving]
