"""`python -m runledger.ops audit` on the emulator: output, JSON and exit codes."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta

import pytest

from runledger.delivery.identify import run_key
from runledger.ledger.epochs import epoch_key, record_epochs
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.record import Status
from runledger.ops.cli import main
from runledger.schedules import parse_schedules
from scheduler_dedup.localrun.rpccount import RpcCounter
from tests.clitools import run_ops
from tests.handler.support import RETENTION, T0, run_record

NOW = T0 + timedelta(minutes=30)
SCOPE = {"DEDUP_ALLOWED_PROJECTS": "acme-prod", "DEDUP_ALLOWED_REGIONS": "europe-west1"}
SCHEDULES = json.dumps(
    [
        {"id": "etl", "schedule": "0 * * * *", "timeZone": "UTC", "retryWindowSeconds": 200},
        {"id": "report", "schedule": "0 9 * * *", "timeZone": "UTC", "retryWindowSeconds": 200},
    ]
)


@pytest.fixture
def env(firestore_emulator, firestore_db) -> dict[str, str]:
    """The handler's settings as an operator exports them, the emulator as the ledger."""
    return (
        firestore_emulator.env()
        | SCOPE
        | {
            "DEDUP_SCHEDULES": SCHEDULES,
            "DEDUP_LEASE_SECONDS": "300",
            "DEDUP_RETENTION_SECONDS": str(int(RETENTION.total_seconds())),
        }
    )


@pytest.fixture
def seeded(firestore_db) -> None:
    """etl ran at 10:00 and 12:00, failed for good at 11:00; report ran at 09:00."""
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    for job, hour, status in (
        ("etl", 10, Status.COMPLETED),
        ("etl", 11, Status.FAILED),
        ("etl", 12, Status.COMPLETED),
        ("report", 9, Status.COMPLETED),
    ):
        when = T0.replace(hour=hour)
        error = "TerminalJobError: bad schema" if status is Status.FAILED else None
        record = run_record(
            f"{job}-{hour}",
            status,
            job=job,
            schedule_time=when,
            expire_at=when + RETENTION,
            error=error,
        )
        store.create(run_key(job, when, "acme-prod", "europe-west1", manual=False), record)


# The emulator is a local run: the CLI does not ask Cloud Scheduler, and says so on stderr.
LOCAL_NOTE = (
    "note: Cloud Scheduler not read (local run on the Firestore emulator): "
    "job states from DEDUP_SCHEDULES\n"
)


def audit_cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["audit", *args], env=env, clock=lambda: NOW, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_json_lists_each_finding_and_exits_1(env, seeded):
    code, out, err = audit_cli(env, "--since", "4h", "--json")
    assert (code, err) == (1, LOCAL_NOTE)
    findings = [(item["job"], item["schedule_time"], item["finding"]) for item in json.loads(out)]
    assert findings == [
        ("etl", "2026-10-16T09:00:00Z", "missed"),
        ("etl", "2026-10-16T11:00:00Z", "failed"),
    ]


def test_text_names_the_runs_and_the_read_cost(env, seeded):
    code, out, _ = audit_cli(env, "--since", "240m")
    assert code == 1
    lines = out.splitlines()
    assert lines[1].split()[:3] == ["etl", "2026-10-16T09:00:00Z", "missed"]
    assert "TerminalJobError: bad schema" in lines[2]
    assert lines[-1].startswith("2 finding(s) in 5 settled scheduled run(s) of 2 job(s)")
    # Reads: the two jobs' epochs (none recorded: the whole window is judged) and 5 runs.
    assert lines[-1].endswith("0 before their job's audit epoch; 7 document read(s)")


def test_the_cli_judges_from_a_recorded_epoch_and_never_writes_one(env, seeded, firestore_db):
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    etl, report = parse_schedules(SCHEDULES)
    # The handler's audit first saw etl at 10:30; report has no epoch.
    record_epochs(store, "acme-prod", "europe-west1", [etl], T0 - timedelta(minutes=90))
    counter = RpcCounter().attach(firestore_db)
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["audit", "--since", "4h", "--json"],
        env=env,
        clock=lambda: NOW,
        client_factory=lambda args, env: firestore_db,
        stdout=out,
        stderr=err,
    )
    assert (code, err.getvalue()) == (1, LOCAL_NOTE)
    findings = [
        (item["job"], item["schedule_time"], item["finding"]) for item in json.loads(out.getvalue())
    ]
    # etl's 09:00 (missed) is before its epoch; its 11:00 failure is after it.
    assert findings == [("etl", "2026-10-16T11:00:00Z", "failed")]
    writes = ("commit", "create_document", "update_document", "batch_write", "delete_document")
    assert sum(counter.calls[name] for name in writes) == 0
    assert list(store.get_epochs([epoch_key("acme-prod", "europe-west1", report.id)])) == []


def test_no_finding_exits_0(env, seeded):
    code, out, _ = audit_cli(env, "--since", "3600s", "--job", "etl", "--json")
    assert (code, json.loads(out)) == (0, [])


@pytest.mark.parametrize(
    ("args", "env_change", "message"),
    [
        (["--job", "nope"], {}, "error: --job: 'nope' is not in DEDUP_SCHEDULES"),
        (["--since", "2d"], {}, "error: --since: must be shorter than the ledger retention"),
        ([], {"DEDUP_SCHEDULES": ""}, "error: DEDUP_SCHEDULES: not set"),
        ([], {"DEDUP_SCHEDULES": "[1]"}, "error: DEDUP_SCHEDULES[0]: each entry must be"),
        ([], {"DEDUP_ALLOWED_REGIONS": ""}, "error: DEDUP_SCHEDULES: the audit computes"),
    ],
)
def test_bad_input_says_what_and_exits_2(env, args, env_change, message):
    code, out, err = audit_cli(env | env_change, *args)
    assert (code, out) == (2, "")
    assert err.startswith(message)
    assert "Traceback" not in err


def test_as_a_command_a_bad_duration_exits_2_without_a_traceback(env):
    result = run_ops("audit", "--since", "ninety", env=env)
    assert result.returncode == 2
    assert "'ninety' is not a duration such as 90m, 2h or 3600s" in result.stderr
    assert "Traceback" not in result.stderr


def test_as_a_command_a_bad_unit_is_one_error_line_without_the_usage(env):
    result = run_ops("audit", "--since", "5x", env=env)
    assert (result.returncode, result.stdout) == (2, "")
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: argument --since: '5x'"), lines
    assert "usage:" not in result.stderr


def test_as_a_command_findings_exit_1(env, seeded, firestore_emulator):
    result = run_ops("audit", "--project", firestore_emulator.project, "--since", "2h", env=env)
    # The real clock is far from the seeded day: every hour in the window is missed.
    assert result.returncode == 1, result.stderr
    assert "missed" in result.stdout


def paused_etl(project: str, region: str, env: dict[str, str]):
    """A Scheduler where etl was paused from 08:40 to 09:20 in the console; report as deployed."""
    from runledger.audit.pause_log import StateChange
    from runledger.audit.scheduler_state import LiveJob

    assert (project, region) == ("acme-prod", "europe-west1")
    log = (
        StateChange(T0.replace(hour=8, minute=40), True),
        StateChange(T0.replace(hour=9, minute=20), False),
    )

    def listing(since: datetime) -> dict[str, LiveJob]:
        return {
            "etl": LiveJob("etl", False, "0 * * * *", "UTC", log, since),
            "report": LiveJob("report", False, "0 9 * * *", "UTC", (), since),
        }

    return listing


def test_a_time_inside_a_pause_the_log_shows_is_not_run_and_json_keeps_only_findings(env, seeded):
    runs = []
    for as_json in (False, True):
        out, err = io.StringIO(), io.StringIO()
        code = main(
            ["audit", "--since", "4h", *(["--json"] if as_json else [])],
            env=env,
            clock=lambda: NOW,
            lister_factory=paused_etl,
            stdout=out,
            stderr=err,
        )
        runs.append((code, out.getvalue(), err.getvalue()))
    (text_code, text, text_err), (json_code, raw, json_err) = runs

    # 09:00 fell inside the pause (deliberately not run, not missed); 11:00 failed.
    assert (json_code, json_err) == (1, "")
    found = [(item["job"], item["schedule_time"], item["finding"]) for item in json.loads(raw)]
    assert found == [("etl", "2026-10-16T11:00:00Z", "failed")]
    assert (text_code, text_err) == (1, "")
    assert "job states from Cloud Scheduler; 1 of paused jobs not run" in text.splitlines()[-1]


@pytest.mark.parametrize(
    ("etl", "detail"),
    [
        # Paused in the console while the stack runs it: not an excuse.
        (("0 * * * *", True), "paused in Cloud Scheduler, enabled in the stack"),
        # Its schedule edited in the console.
        (("*/30 * * * *", False), "'*/30 * * * *'"),
    ],
)
def test_a_job_scheduler_holds_otherwise_than_the_stack_is_one_drifted_line(
    env, seeded, etl, detail
):
    from runledger.audit.scheduler_state import LiveJob

    def edited(project: str, region: str, env: dict[str, str]):
        return lambda since: {
            "etl": LiveJob("etl", etl[1], etl[0], "UTC"),
            "report": LiveJob("report", False, "0 9 * * *", "UTC"),
        }

    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["audit", "--since", "4h", "--json"],
        env=env,
        clock=lambda: NOW,
        lister_factory=edited,
        stdout=out,
        stderr=err,
    )
    (drifted,) = json.loads(out.getvalue())
    assert code == 1
    assert (drifted["job"], drifted["finding"], drifted["schedule_time"]) == (
        "etl",
        "drifted",
        None,
    )
    assert detail in drifted["detail"]


def test_as_a_command_on_the_emulator_a_stack_paused_job_is_listed_and_stderr_says_why(
    env, firestore_emulator
):
    entries = json.loads(SCHEDULES)
    entries[0]["paused"] = True
    result = run_ops(
        "audit",
        "--project",
        firestore_emulator.project,
        "--since",
        "2h",
        "--job",
        "etl",
        env=env | {"DEDUP_SCHEDULES": json.dumps(entries)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == LOCAL_NOTE
    assert "paused (not run, not a finding): etl" in result.stdout.splitlines()
    assert result.stdout.splitlines()[-1].startswith("0 finding(s) in 0 settled scheduled run(s)")
