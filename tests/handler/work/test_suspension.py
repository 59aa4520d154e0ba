"""Suspending a job, after N failures in a row or by hand, through the handler and the CLI.

On the emulator: a job with `suspendAfterFailures: 2` whose scheduled runs fail
for good twice in a row is suspended; later deliveries are answered 200
`suspended`, recorded `suspended` and never run; a completion resets the count;
`ops suspend`/`ops resume` record the note, who and when, and refuse bad input in
one line, writing nothing; the handler's audit logs one `suspended` finding per
suspension, counts released runs toward it, and judges no time recorded suspended missed.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from runledger.delivery.identify import run_key
from runledger.exceptions import TerminalJobError
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.record import Status
from runledger.ledger.suspension import suspension_key
from runledger.schedules import AUDIT_JOB_ID, audit_settings
from runledger.sdk.context import RunContext
from runledger.testing import DEFAULT_SCHEDULE_TIME, JobHarness
from tests.handler.support import (
    OPS_SCOPE,
    T0,
    FakeClock,
    deliver,
    make_app,
    ops_at,
    ops_env,
    scheduler_headers,
    settings,
)

SCOPE = OPS_SCOPE
ENTRY = {
    "id": "export",
    "schedule": "*/10 * * * *",
    "timeZone": "UTC",
    "retryWindowSeconds": 200,
    "suspendAfterFailures": 2,
}
PLAIN = {"id": "report", "schedule": "0 * * * *", "timeZone": "UTC", "retryWindowSeconds": 200}
SCHEDULES = json.dumps([ENTRY, PLAIN])


class Export:
    """Fails for good while `failing`, else completes; counts its calls."""

    def __init__(self) -> None:
        self.failing = "terminal"
        self.calls = 0

    def __call__(self, ctx: RunContext) -> None:
        self.calls += 1
        if self.failing == "terminal":
            raise TerminalJobError("partner API refuses the schema")
        if self.failing == "retryable":
            raise ConnectionError("partner API down")


@pytest.fixture
def world(firestore_db):
    job = Export()
    clock = FakeClock(T0 + timedelta(seconds=5))
    config = audit_settings({"DEDUP_SCHEDULES": SCHEDULES} | SCOPE, settings(**SCOPE))
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    app = make_app(store, {"export": job, "report": lambda ctx: None}, clock, audit=config, **SCOPE)
    return app, job, clock, store


def at(minutes: int) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_of(minutes: int) -> str:
    when = T0 + timedelta(minutes=minutes)
    return run_key("export", when, "acme-prod", "europe-west1", manual=False)


def send(app, clock, minutes: int):
    """The delivery of the time `minutes` after T0, a few seconds after it."""
    clock._now = T0 + timedelta(minutes=minutes, seconds=5)
    return deliver(app, scheduler_headers(job="export", schedule_time=at(minutes)))


def lines(capsys) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_two_failures_in_a_row_suspend_the_job_and_later_runs_are_not_run(world, capsys):
    app, job, clock, store = world

    assert [send(app, clock, minutes).outcome for minutes in (0, 10)] == ["failed_terminal"] * 2
    logged = lines(capsys)
    assert [line.get("consecutive_failures") for line in logged] == [1, 2]
    assert logged[1]["job_suspended"] is True

    answer = send(app, clock, 20)

    assert (answer.status, answer.outcome) == (200, "suspended")
    assert "job suspended by runledger (suspendAfterFailures)" in answer.message
    assert job.calls == 2
    record = store.get(key_of(20)).record
    assert record.status is Status.SUSPENDED
    assert record.error.startswith("suspended by runledger (suspendAfterFailures): 2 scheduled")
    # A retry of that run is a duplicate of a run recorded suspended: still never run.
    again = deliver(app, scheduler_headers(job="export", schedule_time=at(20)))
    assert (again.status, again.outcome, job.calls) == (200, "duplicate_suspended", 2)


def test_a_completion_resets_the_count(world):
    app, job, clock, _ = world
    send(app, clock, 0)
    job.failing = None
    assert send(app, clock, 10).outcome == "completed"
    job.failing = "terminal"
    send(app, clock, 20)
    assert send(app, clock, 30).outcome == "failed_terminal"  # 1, 0, 1, then the second: 2
    assert send(app, clock, 40).outcome == "suspended"


ops = ops_at


@pytest.fixture
def env(firestore_emulator, firestore_db) -> dict[str, str]:
    return ops_env(firestore_emulator, DEDUP_SCHEDULES=SCHEDULES)


def test_suspend_and_resume_by_hand_record_the_note_who_and_when(env, world, capsys):
    app, job, clock, _ = world
    job.failing = None
    now = T0 + timedelta(minutes=3)

    code, out, err = ops(
        env,
        now,
        "suspend",
        "--job",
        "export",
        "--note",
        "partner outage, INC-123",
        "--by",
        "ana@acme.example",
    )

    assert (code, err) == (0, "")
    assert out.startswith("suspended job export by ana@acme.example: partner outage, INC-123")
    answer = send(app, clock, 10)
    assert (answer.outcome, job.calls) == ("suspended", 0)
    assert "ana@acme.example" in answer.message and "INC-123" in answer.message
    code, out, _ = ops(env, now, "describe", "--job", "export", "--json")
    held = json.loads(out)["suspension"]
    assert (held["suspended"], held["reason"], held["by"], held["note"]) == (
        True,
        "operator",
        "ana@acme.example",
        "partner outage, INC-123",
    )
    assert held["since"] == now.isoformat()

    code, out, err = ops(
        env, now, "resume", "--job", "export", "--by", "bo", "--note", "partner back"
    )

    assert (code, err) == (0, "")
    assert out == "resumed job export by bo: its next delivery runs\n"
    assert send(app, clock, 20).outcome == "completed"
    code, text, _ = ops(env, now, "describe", "--job", "export")
    assert "suspension   not suspended; 0 of 2 failures in a row; resumed by bo at" in text
    assert "(partner back)" in text


def test_resume_ends_an_automatic_suspension(env, world):
    app, job, clock, _ = world
    send(app, clock, 0)
    send(app, clock, 10)
    job.failing = None
    assert send(app, clock, 20).outcome == "suspended"

    code, _, err = ops(env, T0 + timedelta(minutes=25), "resume", "--job", "export")

    assert (code, err) == (0, "")
    assert send(app, clock, 30).outcome == "completed"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["suspend", "--job", "nope", "--note", "x"], "error: --job: 'nope' is not in DEDUP_"),
        (["suspend", "--job", "report", "--note", "x"], "error: --job: 'report' has no suspendAft"),
        (["suspend", "--job", "export", "--note", "  "], "error: --note: say why the job is susp"),
        (["suspend", "--job", "export"], "error: the following arguments are required: --note"),
        (["resume", "--job", "export"], "error: job 'export' is not suspended; nothing written"),
    ],
)  # fmt: skip
def test_bad_input_is_one_error_line_and_writes_nothing(env, firestore_db, args, message, capsys):
    try:
        code, _, err = ops(env, T0, *args)
    except SystemExit as exc:  # argparse's usage errors exit through SystemExit
        code, err = exc.code, capsys.readouterr().err
    assert code != 0
    assert err.startswith(message) and err.count("\n") == 1
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    assert store.get_suspension(suspension_key("acme-prod", "europe-west1", "export")) is None


def test_suspending_a_suspended_job_is_refused(env):
    ops(env, T0, "suspend", "--job", "export", "--note", "first", "--by", "ana")
    code, _, err = ops(env, T0, "suspend", "--job", "export", "--note", "second", "--by", "bo")
    assert code == 1
    assert err.startswith("error: job 'export' is suspended already (by ana since ")
    assert err.count("\n") == 1


def run_audit(app, clock, capsys, minutes: int) -> list[dict[str, Any]]:
    clock._now = T0 + timedelta(minutes=minutes)
    capsys.readouterr()
    answer = deliver(app, scheduler_headers(job=AUDIT_JOB_ID, schedule_time=at(minutes)))
    assert (answer.status, answer.outcome) == (200, "completed")
    return lines(capsys)


def test_the_audit_reports_a_suspension_once_and_no_suspended_time_missed(world, capsys):
    """12:30 to 12:50 are never delivered (the handler unreachable): those are missed."""
    app, _, clock, _ = world
    run_audit(app, clock, capsys, -5)  # records the job's epoch: 11:55
    send(app, clock, 0)
    send(app, clock, 10)
    send(app, clock, 20)  # recorded suspended

    first = run_audit(app, clock, capsys, 60)
    second = run_audit(app, clock, capsys, 70)

    def of(logged: list[dict[str, Any]], outcome: str) -> list[dict[str, Any]]:
        return [
            line
            for line in logged
            if line.get("outcome") == outcome and line.get("job") in ("export", AUDIT_JOB_ID)
        ]

    (finding,) = of(first, "job_suspended")
    assert finding["job"] == "export"
    assert finding["detail"].startswith("suspended by runledger (suspendAfterFailures) since ")
    assert of(second, "job_suspended") == []  # pages once, not per audit
    assert [line["schedule_time"] for line in of(first, "run_failed")] == [at(0), at(10)]
    assert [line["schedule_time"] for line in of(first, "run_missed")] == [at(30), at(40), at(50)]
    assert at(20) not in [line.get("schedule_time") for line in first + second]
    (summary,) = of(first, "audit_summary")
    assert summary["suspended_runs"] == 1  # 12:20, recorded suspended
    assert summary["suspended_jobs"][0]["job"] == "export"


def test_runs_the_audit_finds_released_count_toward_a_suspension(world, capsys):
    app, job, clock, _ = world
    job.failing = "retryable"
    run_audit(app, clock, capsys, -5)
    for minutes in (0, 10):
        assert send(app, clock, minutes).outcome == "failed_retryable"

    logged = run_audit(app, clock, capsys, 25)

    assert [line["outcome"] for line in logged if line.get("job") == "export"] == [
        "run_released",
        "run_released",
    ]
    assert send(app, clock, 40).outcome == "suspended"
    assert job.calls == 2
    found = run_audit(app, clock, capsys, 50)
    assert [line["outcome"] for line in found if line.get("outcome") == "job_suspended"] == [
        "job_suspended"
    ]


def test_ops_audit_shows_the_suspension_and_no_suspended_time_missed(env, world):
    app, _, clock, _ = world
    note = ["--note", "INC-9", "--by", "ana"]
    ops(env, T0 + timedelta(minutes=3), "suspend", "--job", "export", *note)
    for minutes in (10, 20, 30, 40):
        assert send(app, clock, minutes).outcome == "suspended"

    since = ["--since", "65m", "--job", "export", "--json"]
    code, out, err = ops(env, T0 + timedelta(minutes=60), "audit", *since)

    assert code == 1, err
    found = [(item["finding"], item["schedule_time"]) for item in json.loads(out)]
    # 12:10 to 12:40 recorded suspended: not run, on purpose; 12:00 and 12:50 never delivered.
    assert found == [("suspended", None), ("missed", at(0)), ("missed", at(50))]
    (held,) = [item for item in json.loads(out) if item["finding"] == "suspended"]
    assert held["detail"].startswith("suspended by ana since 2026-10-16T12:03:00+00:00: INC-9")


def test_the_job_harness_suspends_as_the_handler_does():
    job = Export()
    harness = JobHarness(
        {"export": job, "report": lambda ctx: None}, env={"DEDUP_SCHEDULES": SCHEDULES}
    )
    start = DEFAULT_SCHEDULE_TIME.replace(minute=0)

    outcomes = []
    for minutes in (0, 10, 20):
        harness.clock.advance(timedelta(minutes=10))
        outcomes.append(harness.deliver("export", schedule_time=start + timedelta(minutes=minutes)))

    assert [d.outcome for d in outcomes] == ["failed_terminal", "failed_terminal", "suspended"]
    assert (outcomes[2].ran, outcomes[2].record.status) == (False, Status.SUSPENDED)
