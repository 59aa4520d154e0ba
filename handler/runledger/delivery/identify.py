"""Turn one HTTP delivery's headers into the run it belongs to.

The Scheduler headers are not authenticated and arrive in any case and
UTC offset, so everything here is strict: a delivery that cannot be keyed
exactly is refused with a one-line reason before anything is written. The one
header that may be absent is the ScheduleTime of a forced run; such a run is
keyed by the window it arrived in (see `identify_delivery`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

from runledger.config import ManualRuns, Settings
from runledger.exceptions import BadRequest
from runledger.facts import (
    DEFAULT_PROJECT_HEADER,
    DEFAULT_REGION_HEADER,
    JOB_HEADER,
    JOB_ID,
    SCHEDULE_HEADER,
    TRIGGER_MANUAL,
    TRIGGER_SCHEDULED,
)
from runledger.ledger.run import RunIdentity

# Scheduled deliveries never arrive before their schedule time; one stamped
# further ahead than this is a forced run carrying the next scheduled time.
MANUAL_TOLERANCE = timedelta(seconds=10)
# The furthest a forced run's "next scheduled time" can lie ahead: a yearly job.
MAX_FUTURE = timedelta(days=400)
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))",
    re.ASCII,  # \d would otherwise match any Unicode digit, which int() accepts
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ID_VALUE = re.compile(r"[A-Za-z0-9._:-]{1,100}")
_MAX_SHOWN = 60


def _shown(value: str) -> str:
    """Quote untrusted input for a reason line, bounded and printable."""
    cut = value[:_MAX_SHOWN] + ("..." if len(value) > _MAX_SHOWN else "")
    return repr(cut)


def header_values(headers: Iterable[tuple[str, str]], name: str) -> list[str]:
    wanted = name.lower()
    return [value for key, value in headers if key.lower() == wanted]


def single_header(headers: Iterable[tuple[str, str]], name: str) -> str:
    values = header_values(headers, name)
    if not values or not values[0].strip():
        raise BadRequest(f"missing header {name}")
    if len(values) > 1:
        raise BadRequest(f"header {name} is repeated")
    return values[0].strip()


def parse_schedule_time(value: str) -> datetime:
    """Parse RFC 3339 and normalise to UTC, so every offset of one instant is one run."""
    match = _RFC3339.fullmatch(value)
    if not match:
        raise BadRequest(f"{SCHEDULE_HEADER} {_shown(value)} is not an RFC 3339 timestamp")
    year, month, day, hour, minute, second = (int(g) for g in match.group(1, 2, 3, 4, 5, 6))
    if second == 60:
        raise BadRequest(f"{SCHEDULE_HEADER} {_shown(value)} is a leap second; not a schedule time")
    micros = int((match.group(7) or "0")[:6].ljust(6, "0"))
    offset = timedelta(0)
    if match.group(9):
        offset_h, offset_m = int(match.group(10)), int(match.group(11))
        if offset_h > 23 or offset_m > 59:
            raise BadRequest(f"{SCHEDULE_HEADER} {_shown(value)} has an invalid UTC offset")
        offset = timedelta(hours=offset_h, minutes=offset_m)
        if match.group(9) == "-":
            offset = -offset
    try:
        local = datetime(year, month, day, hour, minute, second, micros, tzinfo=UTC)
        return local - offset
    except (ValueError, OverflowError) as exc:
        raise BadRequest(f"{SCHEDULE_HEADER} {_shown(value)} is out of range") from exc


def _id_header(headers: Iterable[tuple[str, str]], name: str, allowed: frozenset[str]) -> str:
    value = single_header(headers, name)
    if not _ID_VALUE.fullmatch(value):
        raise BadRequest(f"header {name} {_shown(value)} is not a valid identifier")
    if allowed and value not in allowed:
        raise BadRequest(f"header {name} {_shown(value)} is not served here", status=403)
    return value


def _key(job: str, instant: datetime, project: str, region: str, kind: str) -> str:
    canonical = "\n".join(
        [
            "v1",
            project,
            region,
            job,
            instant.astimezone(UTC).isoformat(timespec="microseconds"),
            kind,
        ]
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def run_key(job: str, schedule_time: datetime, project: str, region: str, manual: bool) -> str:
    return _key(job, schedule_time, project, region, "manual" if manual else "scheduled")


def generation_key(
    job: str, schedule_time: datetime, project: str, region: str, generation: int
) -> str:
    """The run key of a scheduled time's rerun number `generation` (`backfill --only all`).

    Generation 0 is the time's own run (`run_key`); each rerun of a completed time
    is a run of its own under this key, so the first record stays as it was and the
    rerun is claimed, and so run, once like any other.
    """
    if generation == 0:
        return run_key(job, schedule_time, project, region, manual=False)
    return _key(job, schedule_time, project, region, f"scheduled-generation-{generation}")


def wall_time_instant(schedule_time: datetime, zone: ZoneInfo | None) -> datetime:
    """The instant one local wall time's run is keyed by: its first, if the clocks repeat it.

    Cloud Scheduler runs on wall-clock time in the job's time zone, and on the
    day a daylight-saving change repeats an hour it "may observe execution
    anomalies" ("Cron job format and time zone", Time zone): it may fire a wall
    time twice. The audit expects one run per wall time (`runledger.audit.expected`), so
    a delivery stamped with the second occurrence (fold=1) is the same run as one
    stamped with the first. Every other instant is its own key, as before.
    """
    if zone is None:
        return schedule_time
    local = schedule_time.astimezone(zone)
    if not local.fold:
        return schedule_time
    return local.replace(fold=0).astimezone(UTC)


@dataclass(frozen=True)
class Delivery:
    """The run a delivery names, and for an unstamped forced run the run it may repeat.

    `earlier` is the same forced run had its first copy arrived in the previous
    window; the handler joins that run when its record exists.
    """

    run: RunIdentity
    earlier: RunIdentity | None = None


def unstamped_window(settings: Settings) -> timedelta:
    """How long copies of a forced run without a ScheduleTime are surely recognised as one run.

    One lease: it covers the request timeout, and so the attemptDeadline after
    which Cloud Scheduler retries, which makes simultaneous copies and a first
    retry after a short backoff fall inside it. A later retry may run again.
    """
    return settings.lease


def _unstamped(
    job: str, project: str, region: str, delivered: str, window: timedelta, index: int
) -> RunIdentity:
    start = _EPOCH + window * index
    return RunIdentity(
        key=_key(job, start, project, region, "manual-unstamped"),
        job=job,
        schedule_time=start,
        project=project,
        region=region,
        manual=True,
        trigger=TRIGGER_MANUAL,
        delivered_region=delivered,
    )


def schedule_time_text(when: datetime, zone: tzinfo | None = None, timespec: str = "auto") -> str:
    """`when` as a ScheduleTime header value: RFC 3339 in UTC with `Z` (as Cloud
    Scheduler writes it, `facts.SCHEDULE_HEADER`), or at `zone`'s offset (`UTC`
    gives `+00:00`), forms `parse_schedule_time` reads as the same instant.
    `timespec` as `datetime.isoformat` takes it."""
    if zone is None:
        return when.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")
    return when.astimezone(zone).isoformat(timespec=timespec)


def scheduler_headers(
    job: str,
    schedule_time: datetime | str | None,
    project: str | None = None,
    region: str | None = None,
    *,
    project_header: str = DEFAULT_PROJECT_HEADER,
    region_header: str = DEFAULT_REGION_HEADER,
) -> list[tuple[str, str]]:
    """What Cloud Scheduler sends a job's target, the headers `identify_delivery` reads.

    The job's id and its schedule time (a datetime is written by
    `schedule_time_text`; a string as given; None, as for a forced run, sends no
    ScheduleTime), then the stack's project and region headers (the names
    DEDUP_PROJECT_HEADER / DEDUP_REGION_HEADER set; None leaves one out).
    """
    headers = [(JOB_HEADER, job)]
    if schedule_time is not None:
        stamp = (
            schedule_time if isinstance(schedule_time, str) else schedule_time_text(schedule_time)
        )
        headers.append((SCHEDULE_HEADER, stamp))
    if project is not None:
        headers.append((project_header, project))
    if region is not None:
        headers.append((region_header, region))
    return headers


def identify_delivery(
    headers: Iterable[tuple[str, str]],
    settings: Settings,
    jobs: Mapping[str, object],
    now: datetime,
    zones: Mapping[str, ZoneInfo] | None = None,
) -> Delivery:
    """The run a delivery names; `zones` holds each job's time zone (from DEDUP_SCHEDULES)."""
    headers = list(headers)
    job = single_header(headers, JOB_HEADER)
    if not JOB_ID.fullmatch(job):
        raise BadRequest(f"{JOB_HEADER} {_shown(job)} is not a Cloud Scheduler job id")
    stamped = bool(header_values(headers, SCHEDULE_HEADER))
    schedule_time = (
        parse_schedule_time(single_header(headers, SCHEDULE_HEADER)) if stamped else None
    )
    project = _id_header(headers, settings.project_header, settings.allowed_projects)
    delivered = _id_header(headers, settings.region_header, settings.allowed_regions)
    # Every region's delivery of one time is one run: keyed by the key region, if set.
    region = settings.keyed_region(delivered)
    if job not in jobs:
        raise BadRequest(f"unknown job {_shown(job)}: not in {settings.jobs_module}.JOBS", 404)
    if schedule_time is None:
        # "If you trigger a job manually ... this header uses the next scheduled
        # run's timestamp or might be omitted" (Cloud Scheduler, "Deduplicate job
        # requests"). Nothing else in the request is documented to stay the same
        # across its retries, so copies are grouped by arrival time instead.
        if settings.manual_runs is ManualRuns.REJECT:
            raise BadRequest(
                f"forced (manual) run without {SCHEDULE_HEADER} rejected here "
                "(DEDUP_MANUAL_RUNS=reject)",
                403,
            )
        window = unstamped_window(settings)
        index = (now - _EPOCH) // window
        return Delivery(
            run=_unstamped(job, project, region, delivered, window, index),
            earlier=_unstamped(job, project, region, delivered, window, index - 1),
        )
    if schedule_time < now - settings.retention:
        raise BadRequest(
            f"{SCHEDULE_HEADER} is older than the ledger retention "
            f"({int(settings.retention.total_seconds())} s); it cannot be deduplicated"
        )
    if schedule_time > now + MAX_FUTURE:
        raise BadRequest(f"{SCHEDULE_HEADER} is more than {MAX_FUTURE.days} days ahead")
    manual = schedule_time > now + MANUAL_TOLERANCE
    if manual and settings.manual_runs is ManualRuns.REJECT:
        raise BadRequest("forced (manual) runs are rejected here (DEDUP_MANUAL_RUNS=reject)", 403)
    if not manual:
        schedule_time = wall_time_instant(schedule_time, (zones or {}).get(job))
    return Delivery(
        RunIdentity(
            key=run_key(job, schedule_time, project, region, manual),
            job=job,
            schedule_time=schedule_time,
            project=project,
            region=region,
            manual=manual,
            trigger=TRIGGER_MANUAL if manual else TRIGGER_SCHEDULED,
            delivered_region=delivered,
        )
    )


def identify_run(
    headers: Iterable[tuple[str, str]],
    settings: Settings,
    jobs: Mapping[str, object],
    now: datetime,
) -> RunIdentity:
    """The run a delivery belongs to (for an unstamped forced run: its current window's)."""
    return identify_delivery(headers, settings, jobs, now).run
