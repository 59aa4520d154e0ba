"""`python -m runledger.ops backfill`: plan a backfill, and record it for the handler's audit.

Settings come from the environment the handler runs with (DEDUP_SCHEDULES, the
run keys' project and region, DEDUP_AUDIT_JOB, DEDUP_RETENTION_SECONDS), as for
`ops audit`. The CLI writes only the request and its place in the queue
(`runledger.backfill.queue`); the deployed handler's audit job runs it, with the
production job code and identity. Starting that audit now is one
`gcloud scheduler jobs run` (gcloud reference, "gcloud scheduler jobs run":
JOB positional, `--location`, `--project`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import IO, Any

from runledger.audit.expected import AuditTooLarge
from runledger.audit.findings import rfc3339
from runledger.audit.pauses import job_timeline
from runledger.audit.regions import schedule_lister
from runledger.audit.scheduler_state import Lister
from runledger.backfill import queue
from runledger.backfill.firestore_store import FirestoreBackfills
from runledger.backfill.plan import MODE_FAILED, MODE_MISSING, MODES, Plan, plan
from runledger.config import Settings
from runledger.exceptions import ConfigError
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ops.ledger_ops import OpsError
from runledger.schedules import AuditSettings, JobSchedule, audit_settings


def parse_timestamp(text: str) -> datetime:
    """An RFC 3339 timestamp with its offset (`Z` or `+02:00`), as UTC.

    One whose UTC instant falls outside the years 1 to 9999 (`0001-01-01T00:00:00+01:00`)
    is a usage error like any malformed one, not an overflow later on.
    """
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None or "T" not in text.upper():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an RFC 3339 timestamp with an offset, e.g. 2026-10-14T00:00:00Z"
        )
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is out of range: in UTC it is before year 1 or after year 9999"
        ) from None


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    sub = commands.add_parser(
        "backfill",
        parents=[common],
        help="run a job's past scheduled times again, once each",
        description=(
            "Lists the job's scheduled times in [--from, --to) as the audit does and records a "
            "backfill request the handler's audit job runs (through the same claim as a "
            "delivery): --only missing (the default) runs the times that never finished, "
            "failed also reruns runs that failed for good, all also reruns completed ones, "
            "each as a new generation of its time (its first record stays). --dry-run shows, "
            "per time, what each mode would do; with --json, the times it would run, each "
            "with job, schedule_time and action (run, rerun_failed or rerun_completed, with "
            "its generation)."
        ),
    )
    sub.add_argument("--job", required=True, help="Cloud Scheduler job id (in DEDUP_SCHEDULES)")
    sub.add_argument("--from", dest="start", required=True, type=parse_timestamp, help="RFC 3339")
    sub.add_argument("--to", dest="end", required=True, type=parse_timestamp, help="RFC 3339")
    sub.add_argument(
        "--only",
        choices=MODES,
        help="which times to run: missing (default), failed (and missing), all (every time)",
    )
    sub.add_argument("--include-failed", action="store_true", help="the same as --only failed")
    sub.add_argument("--newest-first", action="store_true", help="run the latest times first")
    sub.add_argument("--dry-run", action="store_true", help="show the plan, write nothing")


def backfill_mode(args: argparse.Namespace) -> str:
    """The mode `--only` and its alias `--include-failed` ask for; OpsError if they disagree."""
    if args.include_failed and args.only not in (None, MODE_FAILED):
        raise OpsError(f"--include-failed is --only failed; it cannot go with --only {args.only}")
    if args.include_failed:
        return MODE_FAILED
    return args.only or MODE_MISSING


def job_settings(env: Mapping[str, str], job: str) -> tuple[Settings, AuditSettings, JobSchedule]:
    """The handler's settings, the audit's, and `job`'s schedule; OpsError naming the key."""
    try:
        settings = Settings.from_env(env)
        audit = audit_settings(env, settings)
    except ConfigError as exc:
        raise OpsError(str(exc)) from exc
    if not audit.schedules:
        raise OpsError("DEDUP_SCHEDULES: not set; export the schedules the handler runs with")
    schedule = audit.schedule(job)
    if schedule is None:
        raise OpsError(f"--job: {job!r} is not in DEDUP_SCHEDULES")
    return settings, audit, schedule


def start_audit_command(audit: AuditSettings) -> str:
    return (
        f"gcloud scheduler jobs run {audit.job} --location={audit.region} --project={audit.project}"
    )


def run(
    args: argparse.Namespace,
    env: Mapping[str, str],
    now: datetime,
    client: Any,
    stdout: IO[str],
    operator: str,
    lister_factory: Callable[[str, str, Mapping[str, str]], Lister],
) -> int:
    settings, audit, schedule = job_settings(env, args.job)
    mode = backfill_mode(args)
    if args.start >= args.end:
        raise OpsError("--from must be earlier than --to (the range is [--from, --to))")
    if args.end > now:
        raise OpsError(f"--to {rfc3339(args.end)} is in the future; backfill past times")
    # A record may be gone past the retention, so an older run would read as never run;
    # one lease less leaves the backfill's own run time to finish before its record expires.
    limit = now - (settings.retention - settings.lease)
    if args.start < limit:
        raise OpsError(
            f"--from {rfc3339(args.start)} reaches past the ledger retention "
            f"({int(settings.retention.total_seconds())} s, DEDUP_RETENTION_SECONDS, less one "
            f"lease): runs older than {rfc3339(limit)} cannot be told apart from "
            "runs that never ran"
        )
    store = FirestoreRunStore(client, args.collection)
    try:
        planned = plan(
            schedule,
            args.start,
            args.end,
            store.get_many,
            audit.project,
            audit.region,
            mode,
            now,
            job_timeline(
                schedule_lister(lister_factory, audit.project, audit.scheduler_regions, env),
                schedule,
                args.start,
            ),
            args.newest_first,
        )
    except AuditTooLarge as exc:
        raise OpsError(f"backfill too large: {exc}") from exc
    if args.dry_run:
        _print_plan(planned, args.json, stdout, "dry run, nothing written: would run")
        if not args.json:
            _print_modes(planned, mode, stdout)
        return 0
    key = queue.request_key(
        audit.project,
        audit.region,
        schedule.id,
        args.start,
        args.end,
        mode,
        args.newest_first,
        planned.runs,
    )
    docs = FirestoreBackfills(client, args.collection)
    found = docs.get(key)
    if found is None and not planned.runs:
        _print_plan(planned, args.json, stdout, "nothing to backfill: would run")
        return 0
    document = queue.request_document(
        schedule.id, args.start, args.end, mode, planned.runs, now, operator, args.newest_first
    )
    created, stored = queue.record_request(docs, audit.project, audit.region, key, document)
    command = start_audit_command(audit)
    status = "recorded" if created else f"already recorded ({stored.get('status')})"
    if args.json:
        runs = [run.to_json() for run in planned.runs] if created else []
        print(
            json.dumps({"request": key, "status": status, "runs": runs, "start_audit": command}),
            file=stdout,
        )
        return 0
    if created:
        _print_plan(planned, False, stdout, f"backfill request {key} recorded: will run")
    else:
        print(
            f"backfill request {key} {status}: nothing new written; "
            f"{stored.get('next', 0)} of {len(stored.get('times', []))} time(s) taken so far",
            file=stdout,
        )
    if stored.get("status") == queue.PENDING:
        print(f"the next audit runs it; to start the audit now: {command}", file=stdout)
    return 0


def _print_plan(planned: Plan, as_json: bool, out: IO[str], heading: str) -> None:
    if as_json:
        print(json.dumps([run.to_json() for run in planned.runs]), file=out)
        return
    print(f"{heading} {len(planned.runs)} scheduled time(s)", file=out)
    for item in planned.runs:
        generation = f" (generation {item.generation})" if item.generation else ""
        print(f"  {item.job}  {rfc3339(item.schedule_time)}  {item.action}{generation}", file=out)
    for reason, count in sorted(planned.left.items()):
        print(f"left alone: {count} {reason}", file=out)


def _print_modes(planned: Plan, mode: str, out: IO[str]) -> None:
    """Every time of the range with what each --only mode would do with it (* this one)."""
    print(f"per time, what each mode would do (* --only {mode}):", file=out)
    heads = [f"{'*' if each == mode else ''}{each}" for each in MODES]
    head = f"  {'SCHEDULED':<21} {'LEDGER':<12} " + " ".join(f"{h:<16}" for h in heads)
    print(head.rstrip(), file=out)
    for view in planned.times:
        cells = [_cell(view.actions[each]) for each in MODES]
        line = f"  {rfc3339(view.schedule_time):<21} {view.ledger:<12} "
        print((line + " ".join(f"{cell:<16}" for cell in cells)).rstrip(), file=out)


def _cell(action: str) -> str:
    """An action, or `-` for a time the mode leaves alone (the reasons are counted above)."""
    return "-" if action.startswith("left alone: ") else action
