"""`python -m runledger.ops suspend|resume --job J`: stop a job's runs in the ledger, with a why.

`suspend` needs `--note` (the why, as Temporal's pause note: "partner outage,
INC-123"); `resume` takes one optionally. Both record who (`--by`, else the
credentials' account, else the local user) and when, on the job's suspension
document (`runledger.ledger.suspension`), by compare-and-set: nothing is
written when the input is wrong (a job not in DEDUP_SCHEDULES, or without
`suspendAfterFailures`, whose deliveries never read a suspension), when the
job is suspended already (`suspend`) or not suspended (`resume`), and the
error is one line. `resume` ends an automatic suspension too and resets the
failure count. While suspended, every delivery of the job is answered 200
`suspended` and recorded so; the audit counts those times as deliberately not
run. Cloud Scheduler is not touched: the job keeps its schedule and grants.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from datetime import datetime
from typing import IO, Any

from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.suspension import (
    SuspensionRefused,
    change,
    resumed_by,
    suspended_by,
    suspension_key,
)
from runledger.ops.backfill import job_settings
from runledger.ops.ledger_ops import OpsError


def add_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    suspend = commands.add_parser(
        "suspend",
        parents=[common],
        help="suspend a job in the ledger: its deliveries are answered, not run",
        description=(
            "Records the job suspended, with --note, who and when. Every later delivery is "
            "answered 200 `suspended` and its run recorded suspended (never run); the audit "
            "counts those times as deliberately not run. The job needs suspendAfterFailures."
        ),
    )
    resume = commands.add_parser(
        "resume",
        parents=[common],
        help="end a job's suspension (by hand or after failures)",
        description="Ends the job's suspension, automatic or by hand, and resets its count.",
    )
    for sub, note_help in (
        (suspend, "why (required), e.g. 'partner outage, INC-123'"),
        (resume, "why (optional)"),
    ):
        sub.add_argument("--job", required=True, help="Cloud Scheduler job id (in DEDUP_SCHEDULES)")
        sub.add_argument("--note", required=sub is suspend, help=note_help)
        sub.add_argument("--by", help="who (default: the credentials' account, else the user)")


def run(
    args: argparse.Namespace,
    env: Mapping[str, str],
    now: datetime,
    client: Any,
    operator: str,
    out: IO[str],
) -> int:
    _, audit, job = job_settings(env, args.job)
    if job.suspend_after is None:
        raise OpsError(
            f"--job: {job.id!r} has no suspendAfterFailures, so its deliveries never read a "
            "suspension; set it in the stack (or pause the job in Cloud Scheduler)"
        )
    note = None if args.note is None else " ".join(args.note.split())
    if args.command == "suspend" and not note:
        raise OpsError("--note: say why the job is suspended (it is shown with the suspension)")
    by = (args.by or "").strip() or account(client) or operator
    store = FirestoreRunStore(client, args.collection)
    key = suspension_key(audit.project, audit.region, job.id)
    if args.command == "suspend":
        step = suspended_by(note or "", by, now)
    else:
        step = resumed_by(note, by, now)
    try:
        state = change(store, key, job.id, step)
    except SuspensionRefused as exc:
        raise OpsError(str(exc)) from exc
    if args.json:
        print(json.dumps({"job": job.id, **state.to_json()}), file=out)
    elif state.suspended:
        print(
            f"suspended job {job.id} by {by}: {note}; its deliveries are answered, not run",
            file=out,
        )
    else:
        print(f"resumed job {job.id} by {by}: its next delivery runs", file=out)
    return 0


def account(client: Any) -> str | None:
    """The account of the client's credentials, where they name one (a service account, or
    the user gcloud's application-default login recorded)."""
    credentials = getattr(client, "_credentials", None)
    for name in ("service_account_email", "account"):
        value = getattr(credentials, name, None)
        if isinstance(value, str) and "@" in value:
            return value
    return None
