"""`python -m runledger.ops`: look at the run ledger and release dead letters, from a terminal.

    list     runs, newest first, by --job and/or --status
    show     one run (key or a unique prefix of 8+ hex digits) with its checkpoints and outputs
    stale    in-progress runs whose lease ran out: the attempt died (the watchdog view)
    failed   runs that failed for good (the dead letters)
    release  give a failed run back so its next delivery redoes it (asks first;
             --dry-run shows what would change, --yes skips the question)
    audit    every scheduled time of every job in DEDUP_SCHEDULES over --since,
             held against the ledger: missed, stale, failed and released runs
             (exit 1 when there is any finding, 2 when the audit cannot run)
    backfill run a job's past scheduled times in [--from, --to) again, once each,
             by the handler's audit (runledger.backfill; --dry-run writes nothing)
    describe one job: schedule, overlap, live state, next and recent runs, counts
    suspend  suspend a job in the ledger (--note why): its deliveries are answered, not run
    resume   end a job's suspension, automatic or by hand

Talks to the Firestore emulator when FIRESTORE_EMULATOR_HOST is set, else to
--project with application-default credentials. Every failure is one line on
stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import IO, TYPE_CHECKING, Any, NoReturn

from runledger.audit.expected import AuditTooLarge
from runledger.audit.regions import schedule_lister
from runledger.audit.runner import Audit
from runledger.audit.scheduler_state import Lister, scheduler_lister
from runledger.audit.suspensions import SuspensionAccess
from runledger.config import COLLECTION_ENV, DATABASE_ENV, Settings
from runledger.exceptions import ConfigError
from runledger.facts import DEFAULT_COLLECTION, DEFAULT_DATABASE
from runledger.ledger.epochs import read_epochs
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.record import Status
from runledger.ledger.suspension import Suspension, suspension_key
from runledger.ledger.suspension import read as read_suspension
from runledger.ops import backfill, describe, suspend
from runledger.ops.ledger_ops import LedgerOps, OpsError
from runledger.ops.output import Printer, describe_release, one_line, print_audit
from runledger.schedules import JobSchedule

if TYPE_CHECKING:
    from google.cloud import firestore

EXIT_OK, EXIT_ERROR, EXIT_DECLINED = 0, 1, 3
# `audit`: 1 means findings, so an audit that could not run says 2.
EXIT_FINDINGS, EXIT_AUDIT_FAILED = 1, 2
# Builds the audit's lister of live Scheduler jobs from (project, region, environment).
ListerFactory = Callable[[str, str, Mapping[str, str]], Lister]


class _OneLineErrors(argparse.ArgumentParser):
    """A usage error is one `error:` line (exit 2), like every other error of the CLI."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--project", help="Google Cloud project (default: from ADC or env)")
    common.add_argument(
        "--database",
        help=f"Firestore database id (default: DEDUP_DATABASE, else {DEFAULT_DATABASE})",
    )
    common.add_argument(
        "--collection",
        help=f"run ledger collection (default: DEDUP_COLLECTION, else {DEFAULT_COLLECTION})",
    )
    common.add_argument(
        "--json", action="store_true", help="JSON: a list of runs (`show`: one object)"
    )

    parser = _OneLineErrors(
        prog="python -m runledger.ops",
        description="Inspect the scheduler run ledger and release failed runs.",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_OneLineErrors
    )

    listing = commands.add_parser("list", parents=[common], help="runs by job and status")
    listing.add_argument("--job", help="Cloud Scheduler job id")
    listing.add_argument("--status", choices=[s.value for s in Status])
    listing.add_argument("--include-expired", action="store_true", help="show TTL-expired runs")
    listing.add_argument("--limit", type=parse_limit, default=50, help="newest N (default 50)")

    show = commands.add_parser("show", parents=[common], help="one run with its work items")
    show.add_argument("key", help="run key, or a unique prefix of at least 8 hex digits")

    for name, text in (("stale", "runs whose lease ran out"), ("failed", "dead letters")):
        sub = commands.add_parser(name, parents=[common], help=text)
        sub.add_argument("--job", help="Cloud Scheduler job id")
        sub.add_argument("--limit", type=parse_limit, default=50, help="newest N (default 50)")

    release = commands.add_parser("release", parents=[common], help="release a failed run")
    release.add_argument("key", help="run key, or a unique prefix of at least 8 hex digits")
    release.add_argument("--dry-run", action="store_true", help="show the change, write nothing")
    release.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    release.add_argument(
        "--clear-checkpoints",
        action="store_true",
        help="also delete the run's checkpoints so every stage is redone (outputs stay)",
    )
    audit = commands.add_parser(
        "audit",
        parents=[common],
        help="scheduled runs that were missed, stale, failed or released",
        description=(
            "Reads the job schedules from DEDUP_SCHEDULES and the run keys' project and region "
            "from DEDUP_ALLOWED_PROJECTS and DEDUP_ALLOWED_REGIONS, as the handler does. "
            "Judges each job from the epoch the handler's audit recorded for its schedule, "
            "or over the whole window if there is none. "
            "Reports only: catch-up runs in the handler's own audit."
        ),
    )
    audit.add_argument(
        "--since",
        type=parse_duration,
        help="look-back window, e.g. 90m, 2h, 3600s (default: DEDUP_AUDIT_LOOKBACK_SECONDS, 6h)",
    )
    audit.add_argument("--job", help="only this Cloud Scheduler job id")
    backfill.add_parser(commands, common)
    describe.add_parser(commands, common)
    suspend.add_parsers(commands, common)
    return parser


def parse_limit(text: str) -> int:
    """`--limit`: a positive whole number (0 or less would print a table of nothing)."""
    value = text.strip()
    if not (value.isascii() and value.isdigit()) or not int(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(value)


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """`90m`, `2h`, `3600s`, `1d`: a positive whole number and one unit."""
    value, unit = text.strip()[:-1], text.strip()[-1:].lower()
    if unit not in _DURATION_UNITS or not (value.isascii() and value.isdigit()) or not int(value):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration such as 90m, 2h or 3600s (units: s, m, h, d)"
        )
    try:
        return timedelta(seconds=int(value) * _DURATION_UNITS[unit])
    except OverflowError:
        raise argparse.ArgumentTypeError(f"{text!r} is longer than any look-back") from None


def firestore_client(args: argparse.Namespace, env: Mapping[str, str]) -> firestore.Client:
    from google.cloud import firestore

    project = args.project or env.get("GOOGLE_CLOUD_PROJECT") or env.get("GCLOUD_PROJECT")
    if env.get("FIRESTORE_EMULATOR_HOST") and not project:
        raise OpsError("FIRESTORE_EMULATOR_HOST is set: give --project (any id the emulator uses)")
    return firestore.Client(project=project, database=args.database)


def _confirmed(prompt: str, stdin: IO[str], stderr: IO[str]) -> bool:
    print(f"{prompt} [y/N] ", end="", file=stderr, flush=True)
    answer = stdin.readline()
    return answer.strip().lower() in {"y", "yes"}


def run_command(
    args: argparse.Namespace,
    ops: LedgerOps,
    now: datetime,
    stdin: IO[str],
    stdout: IO[str],
    stderr: IO[str],
) -> int:
    printer = Printer(stdout, args.json, now)
    if args.command == "list":
        status = None if args.status is None else Status(args.status)
        rows = ops.runs(now, job=args.job, status=status, include_expired=args.include_expired)
        printer.rows(rows, args.limit, "no runs match")
    elif args.command == "stale":
        printer.rows(ops.stale(now, args.job), args.limit, "no stale runs")
    elif args.command == "failed":
        printer.rows(ops.failed(now, args.job), args.limit, "no failed runs")
    elif args.command == "show":
        row = ops.find(args.key)
        printer.run(row, ops.work_items(row.key))
    else:
        plan = ops.plan_release(args.key, now, args.clear_checkpoints)
        description = describe_release(plan)
        if args.dry_run:
            print(f"dry run, nothing written: would {description}", file=stdout)
            return EXIT_OK
        if not args.yes and not _confirmed(f"{description}?", stdin, stderr):
            print("not released", file=stderr)
            return EXIT_DECLINED
        ops.release(plan, now, f"runledger.ops by {_operator()}")
        print(f"released run {plan.row.key}: its next delivery will redo it", file=stdout)
    return EXIT_OK


def run_audit(
    args: argparse.Namespace,
    env: Mapping[str, str],
    now: datetime,
    client_factory: Callable[[argparse.Namespace, Mapping[str, str]], Any],
    stdout: IO[str],
    stderr: IO[str],
    lister_factory: ListerFactory = scheduler_lister,
) -> int:
    """The audit from a terminal: settings from the environment, ledger from --project.

    Job states come from Cloud Scheduler where it can be read; where not, the
    audit goes on from DEDUP_SCHEDULES and says so on stderr.
    """
    from runledger.schedules import audit_settings

    settings = Settings.from_env(env)
    audit_config = audit_settings(env, settings)
    if not audit_config.schedules:
        raise ConfigError("DEDUP_SCHEDULES: not set; export the schedules the handler runs with")
    if args.job is not None and audit_config.schedule(args.job) is None:
        raise ConfigError(f"--job: {args.job!r} is not in DEDUP_SCHEDULES")
    if args.since is not None and args.since >= settings.retention:
        raise ConfigError(
            f"--since: must be shorter than the ledger retention "
            f"({int(settings.retention.total_seconds())} s, DEDUP_RETENTION_SECONDS); "
            "older runs may be gone and would read as missed"
        )
    store = FirestoreRunStore(client_factory(args, env), args.collection)

    def epochs(schedules: Sequence[JobSchedule], _now: datetime) -> dict[str, datetime]:
        """The epochs the handler's audit recorded; the CLI never writes one."""
        return read_epochs(store, audit_config.project, audit_config.region, schedules)

    def suspensions(schedules: Sequence[JobSchedule]) -> dict[str, Suspension]:
        """The jobs' suspensions, read only: the CLI shows them, the handler's audit marks them."""
        found = {
            job.id: read_suspension(
                store, suspension_key(audit_config.project, audit_config.region, job.id)
            )
            for job in schedules
        }
        return {job: state for job, state in found.items() if state is not None}

    audit = Audit(
        audit_config,
        lease=settings.lease,
        read=store.get_many,
        clock=lambda: now,
        epochs=epochs,
        live=schedule_lister(
            lister_factory, audit_config.project, audit_config.scheduler_regions, env
        ),
        suspensions=SuspensionAccess(suspensions),
    )
    report = audit.run(args.since, args.job)
    if report.scheduler_unread is not None:
        print(f"note: {report.job_states}", file=stderr)
    print_audit(report, args.json, stdout)
    return EXIT_FINDINGS if report.findings else EXIT_OK


def _operator() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in some containers; the note is informational
        return "unknown"


def _error_line(exc: BaseException) -> str:
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    if isinstance(exc, OpsError):
        return str(exc)
    if isinstance(exc, auth_exc.DefaultCredentialsError):
        return (
            "no application-default credentials: run `gcloud auth application-default login` "
            "(or set FIRESTORE_EMULATOR_HOST for the emulator)"
        )
    if isinstance(exc, auth_exc.GoogleAuthError):
        return f"authentication failed: {one_line(str(exc), 200)}"
    if isinstance(exc, gexc.PermissionDenied):
        return f"permission denied: {one_line(exc.message, 200)}"
    if isinstance(exc, gexc.NotFound):
        return f"not found (wrong --project or --database?): {one_line(exc.message, 200)}"
    if isinstance(exc, gexc.GoogleAPICallError):
        return f"Firestore error {type(exc).__name__}: {one_line(exc.message, 200)}"
    if isinstance(exc, gexc.RetryError):
        return "Firestore did not answer in time (network, or wrong emulator host?)"
    return f"{type(exc).__name__}: {one_line(str(exc), 200)}"


def main(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    client_factory: Callable[[argparse.Namespace, Mapping[str, str]], Any] = firestore_client,
    lister_factory: ListerFactory = scheduler_lister,
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
) -> int:
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    env = os.environ if env is None else env
    args = build_parser().parse_args(argv)
    # The ledger's place, as the handler reads it (the exports `make demo ARGS=--keep` prints).
    args.database = args.database or env.get(DATABASE_ENV) or DEFAULT_DATABASE
    args.collection = args.collection or env.get(COLLECTION_ENV) or DEFAULT_COLLECTION
    if args.command == "audit":
        try:
            return run_audit(args, env, clock(), client_factory, stdout, stderr, lister_factory)
        except (ConfigError, AuditTooLarge) as exc:
            print(f"error: {exc}", file=stderr)
        except KeyboardInterrupt:
            print("interrupted", file=stderr)
            return 130
        except Exception as exc:  # the ledger could not be read: no verdict, not "no findings"
            print(f"error: {_error_line(exc)}", file=stderr)
        return EXIT_AUDIT_FAILED
    try:
        if args.command == "backfill":
            client = client_factory(args, env)
            return backfill.run(args, env, clock(), client, stdout, _operator(), lister_factory)
        if args.command == "describe":
            client = client_factory(args, env)
            return describe.run(args, env, clock(), client, lister_factory, stdout)
        if args.command in ("suspend", "resume"):
            client = client_factory(args, env)
            return suspend.run(args, env, clock(), client, _operator(), stdout)
        ops = LedgerOps(client_factory(args, env), args.collection)
        return run_command(args, ops, clock(), stdin, stdout, stderr)
    except KeyboardInterrupt:
        print("interrupted", file=stderr)
        return 130
    except Exception as exc:  # the operator gets one line, whatever went wrong
        print(f"error: {_error_line(exc)}", file=stderr)
        return EXIT_ERROR
