"""`ops backfill` and `ops describe` on the emulator, the backfill run by the handler's audit.

The CLI plans and records a request; the audit job, delivered through the
handler, runs it through the same claim as a delivery. Each job here counts its
executions per schedule time, so "once each" is counted, not assumed.
"""

from __future__ import annotations

import io
import json
import threading
from collections import Counter
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

from runledger.audit.scheduler_state import LiveJob
from runledger.backfill.firestore_store import FirestoreBackfills
from runledger.backfill.runs import Runner, run_pending
from runledger.delivery.identify import run_key
from runledger.exceptions import TerminalJobError
from runledger.ledger.epochs import record_epochs
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.record import Status
from runledger.ledger.run import RunIdentity
from runledger.ops.cli import main
from runledger.schedules import AUDIT_JOB_ID, audit_settings
from runledger.sdk.context import RunContext
from tests.handler.support import (
    OPS_SCOPE,
    RETENTION,
    T0,
    FakeClock,
    FakeScheduler,
    deliver,
    make_app,
    make_ledger,
    ops_at,
    ops_env,
    run_record,
    scheduler_headers,
    settings,
)

NOW = T0 + timedelta(minutes=30)  # 2026-10-16T12:30:00Z
SCOPE = OPS_SCOPE
SCHEDULES = json.dumps(
    [{"id": "export", "schedule": "0 * * * *", "timeZone": "UTC", "retryWindowSeconds": 200}]
)
RANGE = ["--job", "export", "--from", "2026-10-16T06:00:00Z", "--to", "2026-10-16T12:00:00Z"]
START_AUDIT = (
    "gcloud scheduler jobs run runledger-audit --location=europe-west1 --project=acme-prod"
)


@pytest.fixture
def env(firestore_emulator, firestore_db) -> dict[str, str]:
    return ops_env(firestore_emulator, DEDUP_SCHEDULES=SCHEDULES)


def key_of(hour: int) -> str:
    return run_key("export", T0.replace(hour=hour), "acme-prod", "europe-west1", manual=False)


@pytest.fixture
def seeded(firestore_db) -> FirestoreRunStore:
    """06 and 10 completed, 07 failed for good, 09 released; 08 and 11 never ran."""
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    for hour, status in ((6, Status.COMPLETED), (7, Status.FAILED), (9, Status.RELEASED)):
        when = T0.replace(hour=hour)
        record = run_record(
            f"seed-{hour}",
            status,
            job="export",
            schedule_time=when,
            claimed_at=when,
            finished_at=when + timedelta(seconds=30),
            expire_at=when + RETENTION,
            error=None if status is Status.COMPLETED else "partner API down",
        )
        store.create(key_of(hour), record)
    when = T0.replace(hour=10)
    store.create(
        key_of(10),
        run_record(
            "seed-10",
            Status.COMPLETED,
            job="export",
            schedule_time=when,
            expire_at=when + RETENTION,
        ),
    )
    return store


def ops(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    return ops_at(env, NOW, *args)


class Jobs:
    """`export` counts its executions per schedule time; `hold` makes one wait for the test."""

    def __init__(self) -> None:
        self.runs: Counter = Counter()
        self.triggers: list[str] = []
        self.inside = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self._lock = threading.Lock()

    def export(self, ctx: RunContext) -> None:
        with self._lock:
            self.runs[ctx.schedule_time.hour] += 1
            self.triggers.append(ctx.trigger)
        self.inside.set()
        assert self.release.wait(60), "the test never let the job finish"


def audited_app(firestore_db, jobs: Jobs, clock: FakeClock):
    config = audit_settings({"DEDUP_SCHEDULES": SCHEDULES} | SCOPE, settings(**SCOPE))
    return make_app(
        FirestoreRunStore(firestore_db, "scheduler_runs"),
        {"export": jobs.export},
        clock,
        audit=config,
        backfills=lambda: FirestoreBackfills(firestore_db, "scheduler_runs"),
        **SCOPE,
    )


def run_audit(app, capsys, stamp: str = "2026-10-16T12:30:00Z") -> list[dict[str, Any]]:
    """Deliver the audit of `stamp` (as Scheduler would), return the lines it logged."""
    capsys.readouterr()
    answer = deliver(app, scheduler_headers(job=AUDIT_JOB_ID, schedule_time=stamp))
    assert (answer.status, answer.outcome) == (200, "completed")
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    (line,) = [line for line in lines if line.get("outcome") == "audit_summary"]
    return line


def test_dry_run_lists_missed_released_and_with_include_failed_failed_runs(
    env, seeded, firestore_db
):
    code, out, err = ops(env, "backfill", *RANGE, "--dry-run", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == [
        {"job": "export", "schedule_time": "2026-10-16T08:00:00Z", "action": "run"},
        {"job": "export", "schedule_time": "2026-10-16T09:00:00Z", "action": "run"},
        {"job": "export", "schedule_time": "2026-10-16T11:00:00Z", "action": "run"},
    ]
    code, out, _ = ops(env, "backfill", *RANGE, "--include-failed", "--dry-run", "--json")
    assert [(item["schedule_time"][11:13], item["action"]) for item in json.loads(out)] == [
        ("07", "rerun_failed"),
        ("08", "run"),
        ("09", "run"),
        ("11", "run"),
    ]
    code, out, _ = ops(env, "backfill", *RANGE, "--dry-run")
    assert out.splitlines()[0] == "dry run, nothing written: would run 3 scheduled time(s)"
    assert "left alone: 2 completed (--only all reruns it)" in out
    assert "left alone: 1 failed (--only failed or all reruns it)" in out
    backfills = firestore_db.collection("runledger_audit").document("scheduler_runs")
    assert list(backfills.collection("backfills").stream()) == []  # a dry run writes nothing


def scheduler(**script: Any):
    """A lister factory: `export` paused from 07:30 to 08:30 in the console (its audit log),
    or the log unreadable (`log_unread`)."""

    def factory(project: str, region: str, env: Mapping[str, str]) -> FakeScheduler:
        fake = FakeScheduler(lambda: NOW, export="0 * * * *")
        fake.pause("export", T0.replace(hour=7, minute=30))
        fake.resume("export", T0.replace(hour=8, minute=30))
        fake.log_unread = script.get("log_unread")
        return fake

    return factory


def test_a_backfill_never_plans_a_time_inside_a_pause_nor_one_of_unknown_state(env, seeded):
    def dry_run(**script: Any) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        code = main(
            ["backfill", *RANGE, "--dry-run"],
            env=env,
            clock=lambda: NOW,
            lister_factory=scheduler(**script),
            stdout=out,
            stderr=err,
        )
        assert err.getvalue() == ""
        return code, out.getvalue()

    # 08:00 fell in the pause: not run; 09:00 (released) and 11:00 (never ran) are.
    code, out = dry_run()
    assert code == 0
    assert out.splitlines()[0] == "dry run, nothing written: would run 2 scheduled time(s)"
    assert "export  2026-10-16T08:00:00Z" not in out
    # No mode runs it: the per-time table shows it left alone by each.
    assert "  2026-10-16T08:00:00Z  none         -                -                -\n" in out
    assert "left alone: 1 paused (deliberately not run)" in out
    # Without the log, a time no record shows delivered cannot be shown meant to run.
    code, out = dry_run(log_unread="permission logging.logEntries.list denied")
    assert code == 0
    assert out.splitlines()[0] == "dry run, nothing written: would run 1 scheduled time(s)"
    assert "left alone: 2 job state unknown (no pause history (permission" in out


def test_a_backfill_runs_each_time_once_through_the_audit_and_a_repeat_runs_nothing(
    env, seeded, firestore_db, capsys
):
    code, out, err = ops(env, "backfill", *RANGE, "--include-failed")
    assert (code, err) == (0, "")
    assert "will run 4 scheduled time(s)" in out.splitlines()[0]
    assert out.splitlines()[-1] == f"the next audit runs it; to start the audit now: {START_AUDIT}"

    jobs = Jobs()
    clock = FakeClock(NOW + timedelta(seconds=3))
    app = audited_app(firestore_db, jobs, clock)
    lines = run_audit(app, capsys)
    assert jobs.runs == Counter({7: 1, 8: 1, 9: 1, 11: 1})
    assert jobs.triggers == ["backfill"] * 4
    backfill = summary(lines)["backfill"]
    assert (backfill["requests_done"], backfill["runs"], backfill["ran"]) == (1, 4, 4)
    assert backfill["outcomes"] == {"completed": 4}
    run_lines = [line for line in lines if line.get("outcome") == "backfill_completed"]
    assert [line["trigger"] for line in run_lines] == ["backfill"] * 4
    for hour in (7, 8, 9, 11):
        record = seeded.get(key_of(hour)).record
        assert (record.status, record.trigger) == (Status.COMPLETED, "backfill")
    assert seeded.get(key_of(6)).record.trigger == "scheduled"  # left alone

    # The same backfill again: nothing new written, and the next audit runs nothing.
    code, out, _ = ops(env, "backfill", *RANGE, "--include-failed")
    assert code == 0 and "already recorded (done): nothing new written" in out
    code, out, _ = ops(env, "backfill", *RANGE, "--include-failed", "--dry-run", "--json")
    assert json.loads(out) == []
    lines = run_audit(app, capsys, "2026-10-16T12:30:01Z")
    assert summary(lines)["backfill"]["runs"] == 0
    assert jobs.runs == Counter({7: 1, 8: 1, 9: 1, 11: 1})


def test_a_late_scheduler_retry_racing_a_backfill_gives_one_execution(
    env, seeded, firestore_db, capsys
):
    ops_args = ["--job", "export", "--from", "2026-10-16T08:00:00Z", "--to", "2026-10-16T09:00:00Z"]
    assert ops(env, "backfill", *ops_args)[0] == 0
    jobs = Jobs()
    jobs.release.clear()
    clock = FakeClock(NOW + timedelta(seconds=3))
    app = audited_app(firestore_db, jobs, clock)
    answers: list[Any] = []
    audit = threading.Thread(target=lambda: answers.append(run_audit(app, capsys)))
    audit.start()
    assert jobs.inside.wait(60), "the backfill never started the job"
    # Scheduler's late retry of 08:00 arrives while the backfill runs it.
    late = deliver(app, scheduler_headers(job="export", schedule_time="2026-10-16T08:00:00Z"))
    assert (late.status, late.outcome) == (409, "duplicate_in_progress")
    jobs.release.set()
    audit.join(60)
    assert not audit.is_alive()
    # And once the backfill finished, a later retry is a duplicate of a completed run.
    again = deliver(app, scheduler_headers(job="export", schedule_time="2026-10-16T08:00:00Z"))
    assert (again.status, again.outcome) == (200, "duplicate_completed")
    assert jobs.runs == Counter({8: 1})
    assert summary(answers[0])["backfill"]["ran"] == 1


def test_a_range_reaching_past_the_retention_is_refused_with_the_limit(env, seeded):
    code, out, err = ops(
        env, "backfill", "--job", "export", "--from", "2026-10-14T00:00:00Z", "--to",
        "2026-10-16T00:00:00Z", "--dry-run",
    )  # fmt: skip
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and err.startswith("error: --from 2026-10-14T00:00:00Z reaches")
    assert "(86400 s, DEDUP_RETENTION_SECONDS" in err


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--job", "nope", "--from", "2026-10-16T06:00:00Z", "--to", "2026-10-16T07:00:00Z"], 1,
         "error: --job: 'nope' is not in DEDUP_SCHEDULES"),
        (["--job", "export", "--from", "2026-10-16T07:00:00Z", "--to", "2026-10-16T07:00:00Z"], 1,
         "error: --from must be earlier than --to"),
        (["--job", "export", "--from", "yesterday", "--to", "2026-10-16T07:00:00Z"], 2,
         "error: argument --from: 'yesterday' is not an RFC 3339 timestamp"),
        (["--job", "export", "--from", "2026-10-16T06:00:00", "--to", "2026-10-16T07:00:00Z"], 2,
         "error: argument --from: '2026-10-16T06:00:00' is not an RFC 3339 timestamp"),
    ],
)  # fmt: skip
def test_bad_input_is_one_error_line(env, seeded, args, code, message, capsys):
    try:
        got, _, err = ops(env, "backfill", *args)
    except SystemExit as exc:  # argparse's usage errors exit through SystemExit
        got, err = exc.code, capsys.readouterr().err
    assert got == code
    assert err.startswith(message) and err.count("\n") == 1


def test_describe_json_shows_next_and_recent_runs_and_counts(env, seeded):
    code, out, err = ops(env, "describe", "--job", "export", "--json")
    assert (code, err) == (0, "")
    view = json.loads(out)
    assert (view["schedule"], view["time_zone"], view["overlap"]) == ("0 * * * *", "UTC", "allow")
    assert view["state"]["read"] is False
    assert view["state"]["detail"] == "could not be read: local run on the Firestore emulator"
    assert view["next"] == [f"2026-10-16T{hour}:00:00Z" for hour in range(13, 23)]
    recent = [(item["schedule_time"][11:13], item["status"]) for item in view["recent"]]
    # The look-back (6 h) holds 07:00 to 12:00, newest first.
    assert recent == [
        ("12", "missed"),
        ("11", "missed"),
        ("10", "completed"),
        ("09", "released"),
        ("08", "missed"),
        ("07", "failed"),
    ]
    failed = view["recent"][-1]
    assert (failed["trigger"], failed["attempts"], failed["duration_s"]) == ("scheduled", 1, 30)
    assert view["counts"] == {
        "completed": 1,
        "failed": 1,
        "released": 1,
        "skipped": 0,
        "suspended": 0,
        "missed": 3,
    }
    code, text, _ = ops(env, "describe", "--job", "export")
    assert (
        code == 0 and "live state   could not be read: local run on the Firestore emulator" in text
    )


def test_a_delivery_records_scheduled_and_a_forced_run_manual(firestore_db, capsys):
    jobs = Jobs()
    app = audited_app(firestore_db, jobs, FakeClock(NOW + timedelta(seconds=3)))
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    for stamp, trigger in (
        ("2026-10-16T12:00:00Z", "scheduled"),
        ("2026-10-16T13:00:00Z", "manual"),
    ):
        capsys.readouterr()
        answer = deliver(app, scheduler_headers(job="export", schedule_time=stamp))
        assert (answer.status, answer.outcome) == (200, "completed")
        (line,) = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
        assert line["trigger"] == trigger
        assert store.get(line["run_key"]).record.trigger == trigger
    assert jobs.triggers == ["scheduled", "manual"]
    # A record written before the field existed reads as scheduled.
    old = run_record("old", Status.COMPLETED).to_document()
    del old["trigger"]
    firestore_db.collection("scheduler_runs").document("old").create(old)
    assert store.get("old").record.trigger == "scheduled"


def test_a_time_the_ledger_could_not_take_is_tried_again_by_the_next_audit(env, seeded):
    assert ops(env, "backfill", *RANGE)[0] == 0
    docs = FirestoreBackfills(seeded._client, "scheduler_runs")
    answers = iter(["store_unavailable", "completed", "completed", "completed"])
    asked: list[int] = []

    def run(identity, trigger: str) -> str:
        asked.append(identity.schedule_time.hour)
        return next(answers)

    runner = Runner(
        make_ledger(seeded, FakeClock(NOW)),
        {"export": object()},
        lambda job, when: RunIdentity(
            key_of(when.hour), job, when, "acme-prod", "europe-west1", manual=False
        ),
        run,
        lambda: None,
    )
    first = run_pending(docs, runner, "acme-prod", "europe-west1")
    assert (first.requests_done, first.runs, first.ran) == (0, 1, 0)
    assert first.error.startswith("store_unavailable at 2026-10-16T08:00:00Z")
    second = run_pending(docs, runner, "acme-prod", "europe-west1")
    assert (second.requests_done, second.ran, second.error) == (1, 3, None)
    assert asked == [8, 8, 9, 11]


# `backfill --include-failed` decides which failure it reruns from the ledger alone: the
# request names the failed attempt it saw for each time (`failed_attempts`), and the audit
# releases a failure only while its record is still that attempt's, whatever the clocks say.
FAILED_WINDOW = [
    "--job",
    "export",
    "--from",
    "2026-10-16T07:00:00Z",
    "--to",
    "2026-10-16T08:00:00Z",
]


def at_seven(store: FirestoreRunStore, attempt: str, status: Status, **fields: Any) -> None:
    """`export`'s run of 07:00 recorded by `attempt` as `status` (`fields` override)."""
    when = T0.replace(hour=7)
    values = {"claimed_at": when, "expire_at": when + RETENTION} | fields
    record = run_record(attempt, status, job="export", schedule_time=when, **values)
    store.create(key_of(7), record)


def test_a_failure_recorded_on_a_clock_ahead_of_the_operators_is_rerun(env, firestore_db, capsys):
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    # The handler's clock is 10 minutes ahead of the laptop's: its failure is stamped after
    # the moment the operator's clock gives the request.
    at_seven(
        store,
        "seed-7",
        Status.FAILED,
        claimed_at=NOW + timedelta(minutes=9),
        finished_at=NOW + timedelta(minutes=10),
        error="partner API down",
    )
    code, _, err = ops(env, "backfill", *FAILED_WINDOW, "--include-failed")
    assert (code, err) == (0, "")
    jobs = Jobs()
    app = audited_app(firestore_db, jobs, FakeClock(NOW + timedelta(minutes=11)))
    backfill = summary(run_audit(app, capsys))["backfill"]
    assert backfill["outcomes"] == {"completed": 1}
    assert jobs.runs == Counter({7: 1})
    assert store.get(key_of(7)).record.status is Status.COMPLETED


# A run in progress when the operator asks is planned whatever its lease says by the
# laptop's clock: the audit's claim decides by the handler's clock. A lease that ran out
# there is taken over and run; a live one keeps the request waiting for its holder.


def held_at_seven(store: FirestoreRunStore, lease_expires) -> None:
    at_seven(store, "holder-7", Status.IN_PROGRESS, lease_expires=lease_expires)


def test_a_run_whose_lease_ran_out_by_the_handlers_clock_is_backfilled(env, firestore_db, capsys):
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    # Live by the laptop's clock (NOW), over by the handler's (11 minutes on).
    held_at_seven(store, NOW + timedelta(minutes=5))
    code, out, err = ops(env, "backfill", *FAILED_WINDOW)
    assert (code, err) == (0, "")
    assert "2026-10-16T07:00:00Z  run" in out
    jobs = Jobs()
    app = audited_app(firestore_db, jobs, FakeClock(NOW + timedelta(minutes=11)))
    backfill = summary(run_audit(app, capsys))["backfill"]
    assert (backfill["requests_done"], backfill["outcomes"]) == (1, {"completed": 1})
    assert jobs.runs == Counter({7: 1})
    assert store.get(key_of(7)).record.status is Status.COMPLETED


def test_a_run_held_under_a_live_lease_keeps_the_request_waiting_for_its_holder(
    env, firestore_db, capsys
):
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    held_at_seven(store, NOW + timedelta(minutes=30))
    assert ops(env, "backfill", *FAILED_WINDOW)[0] == 0
    jobs = Jobs()
    app = audited_app(firestore_db, jobs, FakeClock(NOW + timedelta(minutes=11)))
    first = summary(run_audit(app, capsys))["backfill"]
    assert (first["requests_done"], first["outcomes"]) == (0, {"duplicate_in_progress": 1})
    found = store.get(key_of(7))
    store.update(key_of(7), {"status": Status.COMPLETED.value}, found.version)  # it finished
    second = summary(run_audit(app, capsys, "2026-10-16T12:40:00Z"))["backfill"]
    assert (second["requests_done"], second["outcomes"]) == (1, {"duplicate_completed": 1})
    assert jobs.runs == Counter()


def test_a_holder_that_fails_after_an_include_failed_request_is_rerun(env, firestore_db, capsys):
    """The simulator's seed 81: in progress when asked, failed for good since, left failed."""
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    held_at_seven(store, NOW + timedelta(minutes=30))
    assert ops(env, "backfill", *FAILED_WINDOW, "--include-failed")[0] == 0
    found = store.get(key_of(7))
    store.update(key_of(7), {"status": Status.FAILED.value}, found.version)  # its holder failed
    jobs = Jobs()
    app = audited_app(firestore_db, jobs, FakeClock(NOW + timedelta(minutes=11)))
    backfill = summary(run_audit(app, capsys))["backfill"]
    assert (backfill["requests_done"], backfill["outcomes"]) == (1, {"completed": 1})
    assert jobs.runs == Counter({7: 1})
    assert store.get(key_of(7)).record.status is Status.COMPLETED


def test_a_holder_that_fails_after_a_request_without_include_failed_stays_failed(
    env, firestore_db, capsys
):
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    held_at_seven(store, NOW + timedelta(minutes=30))
    assert ops(env, "backfill", *FAILED_WINDOW)[0] == 0
    found = store.get(key_of(7))
    store.update(key_of(7), {"status": Status.FAILED.value}, found.version)
    jobs = Jobs()
    app = audited_app(firestore_db, jobs, FakeClock(NOW + timedelta(minutes=11)))
    summary(run_audit(app, capsys))
    assert jobs.runs == Counter()
    assert store.get(key_of(7)).record.status is Status.FAILED


# `ops describe` says of a job what the audit concludes from the same settings: a job
# whose live schedule is not the deployed one is `drifted`, and none of its runs is judged.


def edited_export(project: str, region: str, environment: dict[str, str]):
    return lambda since: {"export": LiveJob("export", False, "*/30 * * * *", "UTC")}


def test_describe_shows_a_drifted_job_as_the_audit_judges_it(env, seeded):
    out, err = io.StringIO(), io.StringIO()
    args = ["describe", "--job", "export", "--json"]
    code = main(
        args, env=env, clock=lambda: NOW, lister_factory=edited_export, stdout=out, stderr=err
    )
    assert (code, err.getvalue()) == (0, "")
    view = json.loads(out.getvalue())
    assert "'*/30 * * * *'" in view["state"]["drift"]
    statuses = {item["schedule_time"][11:13]: item["status"] for item in view["recent"]}
    assert (statuses["08"], statuses["11"], statuses["10"]) == ("drifted", "drifted", "completed")
    assert view["counts"]["missed"] == 0
    text = io.StringIO()
    main(args[:-1], env=env, clock=lambda: NOW, lister_factory=edited_export, stdout=text)
    assert "; drifted: Cloud Scheduler has '*/30 * * * *'" in text.getvalue()


def paused_unlogged(project: str, region: str, environment: dict[str, str]):
    """`export` paused in the console two minutes ago, its PauseJob not in the log yet."""
    fake = FakeScheduler(lambda: NOW, export="0 * * * *")
    return fake.pause("export", NOW - timedelta(minutes=2), logged=False)


def test_describe_shows_times_waiting_for_the_pause_log_as_the_audit_leaves_them(env, seeded):
    out = io.StringIO()
    args = ["describe", "--job", "export", "--json"]
    code = main(args, env=env, clock=lambda: NOW, lister_factory=paused_unlogged, stdout=out)
    assert code == 0
    view = json.loads(out.getvalue())
    # Listed paused, no PauseJob logged and no sighting: a job paused for days and one
    # paused a minute ago look alike, so the times the audit would judge wait, as there.
    assert "may not show its last pause or resume yet" in view["state"]["detail"]
    statuses = {item["schedule_time"][11:13]: item["status"] for item in view["recent"]}
    assert (statuses["08"], statuses["11"], statuses["10"]) == ("pending", "pending", "completed")
    assert view["counts"]["missed"] == 0


def test_a_run_the_operator_releases_after_its_catch_up_failed_is_caught_up_again(
    env, firestore_db, capsys
):
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    at_seven(store, "seed-7", Status.RELEASED)  # Scheduler's retries ended on a retryable failure
    entry = {"id": "export", "schedule": "0 * * * *", "timeZone": "UTC", "retryWindowSeconds": 200}
    entries = json.dumps([entry | {"catchUp": True, "catchUpMaxAgeSeconds": 6 * 3600}])
    config = audit_settings({"DEDUP_SCHEDULES": entries} | SCOPE, settings(**SCOPE))
    record_epochs(store, config.project, config.region, config.schedules, T0 - timedelta(hours=6))
    down, ran = [True], Counter()

    def export(ctx: RunContext) -> None:
        if ctx.schedule_time.hour == 7 and down[0]:
            raise TerminalJobError("partner API still down")
        ran[ctx.schedule_time.hour] += 1

    clock = FakeClock(NOW)
    app = make_app(store, {"export": export}, clock, audit=config, **SCOPE)
    first = run_audit(app, capsys)
    (released,) = [line for line in first if line.get("outcome") == "run_released"]
    assert released["catch_up"] == "failed_terminal"

    # The partner is back; the operator releases the failed catch-up, minutes later.
    down[0] = False
    code, _, err = ops_at(env | {"DEDUP_SCHEDULES": entries}, NOW + timedelta(minutes=3),
                          "release", key_of(7), "--yes")  # fmt: skip
    assert (code, err) == (0, "")
    clock.advance(seconds=600)
    later = run_audit(app, capsys, "2026-10-16T12:40:00Z")

    # The next audit reports the released run and catches it up: it runs, once.
    (again,) = [line for line in later if line.get("outcome") == "run_released"]
    assert (again["schedule_time"], again["catch_up"]) == ("2026-10-16T07:00:00Z", "completed")
    assert ran[7] == 1
    assert store.get(key_of(7)).record.status is Status.COMPLETED
