"""`python -m runledger.ops describe --job J`: one job as an operator asks about it.

Its schedule and time zone, its overlap policy, its active window, its live state in Cloud
Scheduler (`audit.scheduler_state`, best effort: when it cannot be read, the view
says why; a live schedule or zone that is not the deployed one is `drift`, and
its unrun times read `drifted`, not missed, as the audit judges them), the next 10
schedule times, the most recent 10 with what the ledger
holds for each (and how often `backfill --only all` reran it), counts over the
audit's look-back, and the job's backfill requests still pending. Times come from the
audit's own code (`audit.expected.schedule_times`), records are read by computed key
in batches, the audit's epoch bounds what can count as missed: no query, no index.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import IO, Any

from runledger.audit.expected import ExpectedRun, schedule_times
from runledger.audit.findings import judge, rfc3339
from runledger.audit.pauses import State, Timeline, edited, timelines, unknown, weighed
from runledger.audit.regions import by_region, region_states, schedule_lister
from runledger.audit.runner import BATCH
from runledger.audit.scheduler_state import Lister, drift
from runledger.backfill.firestore_store import FirestoreBackfills
from runledger.backfill.plan import rerun_counts
from runledger.backfill.queue import pending_requests
from runledger.delivery.identify import run_key
from runledger.exceptions import SchedulerAbsent, SchedulerUnreadable
from runledger.ledger.epochs import read_epochs
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.overlap import skipped
from runledger.ledger.record import RunRecord, Status
from runledger.ledger.suspension import Suspension, suspension_key
from runledger.ledger.suspension import read as read_suspension
from runledger.ledger.watermarks import read_sighting
from runledger.ops.backfill import job_settings

SHOWN = 10
COUNTED = ("completed", "failed", "released", "skipped", "suspended", "missed")
# Windows tried in turn for the next times: a minutely job needs the first, a yearly one the last.
_AHEAD = (timedelta(days=1), timedelta(days=32), timedelta(days=367), timedelta(days=3700))


def add_parser(commands: Any, common: Any) -> None:
    sub = commands.add_parser(
        "describe",
        parents=[common],
        help="one job: schedule, live state, next and recent runs, counts",
        description=(
            "The job's schedule and time zone, overlap policy, live state in Cloud Scheduler, "
            "next 10 scheduled times, the 10 most recent with status, trigger, attempts, "
            "duration and reruns, counts over the audit's look-back and pending backfills. "
            "--json: one object."
        ),
    )
    sub.add_argument("--job", required=True, help="Cloud Scheduler job id (in DEDUP_SCHEDULES)")


@dataclass(frozen=True)
class Recent:
    schedule_time: datetime
    status: str
    record: RunRecord | None
    run_key: str
    reruns: int = 0  # its reruns of `backfill --only all` (generations past the first run)

    def to_json(self) -> dict[str, Any]:
        record = self.record
        duration = None
        if record is not None and record.finished_at is not None:
            duration = round((record.finished_at - record.claimed_at).total_seconds(), 3)
        return {
            "schedule_time": rfc3339(self.schedule_time),
            "status": self.status,
            "trigger": None if record is None else record.trigger,
            "attempts": None if record is None else record.attempts,
            "duration_s": duration,
            "run_key": self.run_key,
            "reruns": self.reruns,
            # The id of the dead letter published for its final failure, if one was.
            "dead_letter": None if record is None else record.dead_letter_id,
        }


def _next_times(job: Any, now: datetime) -> list[datetime]:
    for ahead in _AHEAD:
        times = [run.schedule_time for run in schedule_times(job, now, now + ahead)]
        if len(times) >= SHOWN or ahead == _AHEAD[-1]:
            return times[:SHOWN]
    return []


def _status(
    run: ExpectedRun,
    present: list[RunRecord],
    now: datetime,
    lease: timedelta,
    epoch: datetime | None,
    line: Timeline,
) -> str:
    """What the ledger says of one time, in the audit's words where it judges it."""
    if any(record.status is Status.COMPLETED for record in present):
        return "completed"
    if skipped(present):
        return "skipped"  # deliberately not run (overlap: skip): never missed
    finding = judge(run, present, now, lease)
    if finding is not None and finding.value in ("missed", "stale"):
        if epoch is not None and run.schedule_time < epoch:
            return "before_epoch"
        if line.at(run.schedule_time) is State.PAUSED:
            return "paused"
        if line.at(run.schedule_time) is State.PENDING:
            return "pending"  # as the audit: judged once the pause log has caught up
        return "missed" if not present else "stale"
    if finding is not None:
        return finding.value
    return present[0].status.value if present else "pending"


def describe(
    args: Any,
    env: Mapping[str, str],
    now: datetime,
    client: Any,
    lister_factory: Callable[[str, str, Mapping[str, str]], Lister],
) -> dict[str, Any]:
    settings, audit, job = job_settings(env, args.job)
    start = now - audit.lookback
    store = FirestoreRunStore(client, args.collection)
    epoch = read_epochs(store, audit.project, audit.region, [job]).get(job.id)
    try:
        listed = schedule_lister(lister_factory, audit.project, audit.scheduler_regions, env)
        listed_live = listed(start)
        regional = region_states(job, listed_live)
        chosen, drifts = by_region([job], listed_live)
        spread = drifts.get(job.id)
        differs = spread.reason if spread is not None else drift(job, chosen)
        listed_live = chosen or {}
        live = listed_live.get(job.id)
        state: dict[str, Any] = {"read": True, "drift": differs or None}
        # A job one region still sends as deployed is judged, as the audit judges it.
        state["drift_blocks"] = bool(differs) and not (spread is not None and spread.judged)
        if regional is not None:
            state["regions"] = regional
        if live is None:
            state.update(paused=None, detail="not in Cloud Scheduler: no run of it is sent")
            line = unknown("not in Scheduler")
        else:
            state.update(paused=live.paused, detail="paused" if live.paused else "enabled")
            # As the audit weighs it: the log against what the audits saw of the job.
            seen = read_sighting(store, audit.project, audit.region, job)
            line = edited(weighed(live, seen, now), live, seen, epoch, now)
            if line.at(now) is State.PENDING:
                state["detail"] += f" ({line.why_at(now)}: times since wait for the audit)"
    except SchedulerUnreadable as exc:
        state = {
            "read": False,
            "paused": None,
            "drift": None,
            "drift_blocks": False,
            "detail": f"could not be read: {exc}",
        }
        line = timelines([job], None, str(exc), isinstance(exc, SchedulerAbsent))[job.id]
    if state.get("paused") and line.at(now) is State.PAUSED and line.paused_since is not None:
        state["since"] = rfc3339(line.paused_since)
    held = None
    if job.suspend_after is not None:
        key = suspension_key(audit.project, audit.region, job.id)
        held = read_suspension(store, key) or Suspension(job.id)
    listed = schedule_times(job, start, now)
    keys = {
        instant: run_key(job.id, instant, audit.project, audit.region, manual=False)
        for run in listed
        for instant in run.instants
    }
    wanted = list(keys.values())
    records: dict[str, RunRecord] = {}
    for offset in range(0, len(wanted), BATCH):
        records.update(store.get_many(wanted[offset : offset + BATCH]))
    recent: list[Recent] = []
    counts = dict.fromkeys(COUNTED, 0)
    for run in listed:
        present = [
            records[keys[instant]]
            for instant in run.instants
            if keys[instant] in records and not records[keys[instant]].is_expired(now)
        ]
        status = _status(run, present, now, settings.lease, epoch, line)
        if state["drift_blocks"] and status in ("missed", "stale"):
            status = "drifted"  # as the audit: a drifted job's runs are not judged
        counted = "missed" if status == "stale" else status
        if counted in counts:
            counts[counted] += 1
        record = present[0] if present else None
        recent.append(Recent(run.schedule_time, status, record, keys[run.instants[0]]))
    shown = recent[-SHOWN:]
    reruns = rerun_counts(
        job.id, [item.schedule_time for item in shown], store.get_many, audit.project, audit.region
    )
    shown = [replace(item, reruns=reruns[item.schedule_time]) for item in shown]
    backfills = pending_requests(
        FirestoreBackfills(client, args.collection), audit.project, audit.region, job.id
    )
    zone = job.zone
    upcoming = _next_times(job, now)
    return {
        "job": job.id,
        "schedule": job.schedule,
        "time_zone": job.time_zone,
        "overlap": job.overlap,
        "window": _window(job, now),
        "suspension": None
        if held is None
        else {"suspend_after_failures": job.suspend_after, **held.to_json()},
        "state": state,
        "next": [rfc3339(moment) for moment in upcoming],
        "next_local": [moment.astimezone(zone).isoformat() for moment in upcoming],
        "recent": [item.to_json() for item in reversed(shown)],
        "counts": counts,
        "backfills": backfills,
        "dead_letter_topic": settings.dead_letter_topic,
        "lookback_s": int(audit.lookback.total_seconds()),
        "epoch": None if epoch is None else rfc3339(epoch),
        "now": rfc3339(now),
    }


def _window(job: Any, now: datetime) -> dict[str, Any] | None:
    """The job's active window (`startAt`/`endAt`) and where `now` stands in it; None: always."""
    if not job.windowed:
        return None
    if job.start_at is not None and now < job.start_at:
        where = "not yet open"
    elif job.end_at is not None and now > job.end_at:
        where = "closed"
    else:
        where = "open"
    return {
        "start_at": None if job.start_at is None else rfc3339(job.start_at),
        "end_at": None if job.end_at is None else rfc3339(job.end_at),
        "now": where,
    }


def print_view(view: Mapping[str, Any], as_json: bool, out: IO[str]) -> None:
    if as_json:
        print(json.dumps(view), file=out)
        return
    state = view["state"]
    live = state["detail"] + (f" since {state['since']}" if state.get("since") else "")
    if state["drift"]:
        live += f"; drifted: {state['drift']}"
    regions = [
        f"  {region:<21} {item['detail']}"
        + (f"; drifted: {item['drift']}" if item["drift"] else "")
        for region, item in state.get("regions", {}).items()
    ]
    lines = [
        f"job          {view['job']}",
        f"schedule     {view['schedule']} ({view['time_zone']})",
        f"overlap      {view['overlap']}",
        f"window       {_window_text(view['window'])}",
        f"suspension   {_suspension_text(view['suspension'])}",
        f"live state   {live}",
        *regions,
        f"audit epoch  {view['epoch'] or '-'}",
        f"dead letters {view['dead_letter_topic'] or 'not pushed (no deadLetterTopic)'}",
        f"next {len(view['next'])} scheduled time(s):",
    ]
    for utc, local in zip(view["next"], view["next_local"], strict=True):
        lines.append(f"  {utc}  (local {local})")
    lines.append(f"most recent {len(view['recent'])} scheduled time(s):")
    lines.append(
        f"  {'SCHEDULED':<21} {'STATUS':<13} {'TRIGGER':<10} TRIES  {'DURATION':<10} RERUNS"
    )
    for item in view["recent"]:
        tries = "-" if item["attempts"] is None else str(item["attempts"])
        duration = "-" if item["duration_s"] is None else f"{item['duration_s']:g} s"
        lines.append(
            f"  {item['schedule_time']:<21} {item['status']:<13} {item['trigger'] or '-':<10} "
            f"{tries:>5}  {duration:<10} {item['reruns']}"
            + ("  dead letter published" if item["dead_letter"] else "")
        )
    hours = view["lookback_s"] / 3600
    counts = ", ".join(f"{count} {name}" for name, count in view["counts"].items())
    lines.append(f"over the audit's look-back ({hours:g} h): {counts}")
    lines.append(f"pending backfills: {len(view['backfills']) or 'none'}")
    for request in view["backfills"]:
        order = ", newest first" if request["newest_first"] else ""
        lines.append(
            f"  --only {request['mode']}{order} [{request['from']}, {request['to']}): "
            f"{request['taken']} of {request['times']} time(s) taken, asked by "
            f"{request['requested_by']} (request {request['request'][:12]})"
        )
    for line in lines:
        print(line, file=out)


def _window_text(window: Mapping[str, Any] | None) -> str:
    if window is None:
        return "always (no startAt/endAt)"
    start, end = window["start_at"] or "open", window["end_at"] or "open"
    return f"{start} .. {end} ({window['now']}; times outside are not run)"


def _suspension_text(held: Mapping[str, Any] | None) -> str:
    if held is None:
        return "none (no suspendAfterFailures)"
    after = held["suspend_after_failures"]
    if held["suspended"]:
        return (
            f"SUSPENDED by {held['by']} since {held['since']}: {held['note']} "
            f"(deliveries answered, not run; `ops resume --job` ends it)"
        )
    text = f"not suspended; {held['failures']} of {after} failures in a row"
    if held["resumed_at"]:
        text += f"; resumed by {held['resumed_by']} at {held['resumed_at']}"
        text += f" ({held['resume_note']})" if held["resume_note"] else ""
    return text


def run(
    args: Any,
    env: Mapping[str, str],
    now: datetime,
    client: Any,
    lister_factory: Callable[[str, str, Mapping[str, str]], Lister],
    out: IO[str],
) -> int:
    view = describe(args, env, now.astimezone(UTC), client, lister_factory)
    print_view(view, args.json, out)
    return 0
