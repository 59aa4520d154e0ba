"""`ops backfill --only missing|failed|all` and `--newest-first`, run by the handler's audit.

The seeded ledger (`test_ops_backfill.seeded`): 06 and 10 completed, 07 failed for
good, 09 released, 08 and 11 never ran. `all` reruns a completed time as a new
generation of it: a run under its own key, so the first record stays as evidence
and the rerun is claimed, and run, once.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta

import pytest

from runledger.delivery.identify import generation_key
from runledger.ledger.record import Status
from runledger.sdk.context import RunContext
from tests.handler.support import T0, FakeClock, deliver, scheduler_headers
from tests.handler.work import test_ops_backfill as base
from tests.handler.work.test_ops_backfill import (
    NOW,
    RANGE,
    Jobs,
    audited_app,
    key_of,
    ops,
    run_audit,
    summary,
)

# The fixtures of `test_ops_backfill`: its environment and its seeded ledger.
env, seeded = base.env, base.seeded


def rerun_key(hour: int, generation: int) -> str:
    when = T0.replace(hour=hour)
    return generation_key("export", when, "acme-prod", "europe-west1", generation)


class Generations(Jobs):
    """Also keeps each execution's (hour, generation, run id), in the order they ran."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, int, str]] = []

    def export(self, ctx: RunContext) -> None:
        self.seen.append((ctx.schedule_time.hour, ctx.generation, ctx.run_id))
        super().export(ctx)


def planned(env, *args: str) -> list[tuple[str, str, int]]:
    code, out, err = ops(env, "backfill", *RANGE, *args, "--dry-run", "--json")
    assert (code, err) == (0, "")
    return [
        (item["schedule_time"][11:13], item["action"], item.get("generation", 0))
        for item in json.loads(out)
    ]


def test_the_dry_run_shows_what_each_mode_would_do_per_time(env, seeded):
    code, out, err = ops(env, "backfill", *RANGE, "--only", "failed", "--dry-run")
    assert (code, err) == (0, "")
    table = out[out.index("per time, what each mode would do (* --only failed):") :]
    assert table.splitlines()[1:] == [
        "  SCHEDULED             LEDGER       missing          *failed          all",
        "  2026-10-16T06:00:00Z  completed    -                -                rerun_completed",
        "  2026-10-16T07:00:00Z  failed       -                rerun_failed     rerun_failed",
        "  2026-10-16T08:00:00Z  none         run              run              run",
        "  2026-10-16T09:00:00Z  released     run              run              run",
        "  2026-10-16T10:00:00Z  completed    -                -                rerun_completed",
        "  2026-10-16T11:00:00Z  none         run              run              run",
    ]
    # --include-failed stays what it was: --only failed.
    assert planned(env, "--include-failed") == planned(env, "--only", "failed")
    assert planned(env) == planned(env, "--only", "missing")
    assert planned(env, "--only", "all", "--newest-first") == [
        ("11", "run", 0),
        ("10", "rerun_completed", 1),
        ("09", "run", 0),
        ("08", "run", 0),
        ("07", "rerun_failed", 0),
        ("06", "rerun_completed", 1),
    ]


def test_all_reruns_completed_times_as_a_new_generation_once_each_and_keeps_the_first_record(
    env, seeded, firestore_db, capsys
):
    code, out, err = ops(env, "backfill", *RANGE, "--only", "all", "--newest-first")
    assert (code, err) == (0, "")
    assert "will run 6 scheduled time(s)" in out.splitlines()[0]
    assert "  export  2026-10-16T10:00:00Z  rerun_completed (generation 1)" in out
    # Asked again before any of it ran: the same request.
    code, out, _ = ops(env, "backfill", *RANGE, "--only", "all", "--newest-first")
    assert "already recorded (pending): nothing new written" in out

    jobs = Generations()
    app = audited_app(firestore_db, jobs, FakeClock(NOW + timedelta(seconds=3)))
    lines = run_audit(app, capsys)
    assert [(hour, generation) for hour, generation, _ in jobs.seen] == [
        (11, 0), (10, 1), (9, 0), (8, 0), (7, 0), (6, 1),
    ]  # fmt: skip
    assert {run_id for hour, _, run_id in jobs.seen if hour in (6, 10)} == {
        rerun_key(6, 1),
        rerun_key(10, 1),
    }
    done = [line for line in lines if line.get("outcome") == "backfill_done"]
    assert [(line["mode"], line["newest_first"]) for line in done] == [("all", True)]
    reran = [line for line in lines if line.get("generation") == 1]
    assert {line["run_key"] for line in reran} == {rerun_key(6, 1), rerun_key(10, 1)}
    assert summary(lines)["backfill"]["outcomes"] == {"completed": 6}
    # The first records stay as they were: evidence of the first runs.
    first = seeded.get(key_of(6)).record
    assert (first.status, first.attempt_id, first.trigger, first.generation) == (
        Status.COMPLETED,
        "seed-6",
        "scheduled",
        0,
    )
    rerun = seeded.get(rerun_key(6, 1)).record
    assert (rerun.status, rerun.trigger, rerun.generation) == (Status.COMPLETED, "backfill", 1)
    assert rerun.schedule_time == T0.replace(hour=6)
    # A late Scheduler retry of 06:00 is still a duplicate of its first run; the next
    # audit runs nothing more.
    late = deliver(app, scheduler_headers(job="export", schedule_time="2026-10-16T06:00:00Z"))
    assert (late.status, late.outcome) == (200, "duplicate_completed")
    lines = run_audit(app, capsys, "2026-10-16T12:30:01Z")
    assert summary(lines)["backfill"]["runs"] == 0
    assert jobs.runs == Counter({6: 1, 7: 1, 8: 1, 9: 1, 10: 1, 11: 1})

    # `all` asked again after its reruns ran: the next generation, a new request.
    assert planned(env, "--only", "all") == [
        ("06", "rerun_completed", 2),
        ("07", "rerun_completed", 1),
        ("08", "rerun_completed", 1),
        ("09", "rerun_completed", 1),
        ("10", "rerun_completed", 2),
        ("11", "rerun_completed", 1),
    ]
    code, out, _ = ops(env, "backfill", *RANGE, "--only", "all")
    assert code == 0 and "recorded: will run 6 scheduled time(s)" in out
    code, view, _ = ops(env, "describe", "--job", "export", "--json")
    (pending,) = json.loads(view)["backfills"]
    assert (pending["mode"], pending["newest_first"], pending["taken"], pending["times"]) == (
        "all",
        False,
        0,
        6,
    )
    run_audit(app, capsys, "2026-10-16T12:30:02Z")
    assert jobs.runs == Counter({6: 2, 7: 2, 8: 2, 9: 2, 10: 2, 11: 2})
    code, view, _ = ops(env, "describe", "--job", "export", "--json")
    described = json.loads(view)
    assert described["backfills"] == []
    reruns = {item["schedule_time"][11:13]: item["reruns"] for item in described["recent"]}
    assert reruns == {"12": 0, "11": 1, "10": 2, "09": 1, "08": 1, "07": 1}
    code, text, _ = ops(env, "describe", "--job", "export")
    assert "  2026-10-16T10:00:00Z  completed     scheduled      1  -          2\n" in text
    assert "pending backfills: none" in text


def test_a_mode_runs_only_what_it_names(env, seeded, firestore_db, capsys):
    assert ops(env, "backfill", *RANGE, "--only", "missing")[0] == 0
    jobs = Generations()
    app = audited_app(firestore_db, jobs, FakeClock(NOW + timedelta(seconds=3)))
    run_audit(app, capsys)
    assert jobs.runs == Counter({8: 1, 9: 1, 11: 1})
    assert ops(env, "backfill", *RANGE, "--only", "failed")[0] == 0
    run_audit(app, capsys, "2026-10-16T12:30:01Z")
    assert jobs.runs == Counter({7: 1, 8: 1, 9: 1, 11: 1})  # the failure, nothing else
    assert seeded.get(rerun_key(6, 1)) is None


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--only", "sometimes"], 2, "error: argument --only: invalid choice: 'sometimes'"),
        (["--only", "all", "--include-failed"], 1,
         "error: --include-failed is --only failed; it cannot go with --only all"),
        (["--only", "missing", "--include-failed"], 1,
         "error: --include-failed is --only failed; it cannot go with --only missing"),
    ],
)  # fmt: skip
def test_bad_modes_are_one_error_line_and_write_nothing(
    env, seeded, firestore_db, args, code, message, capsys
):
    try:
        got, _, err = ops(env, "backfill", *RANGE, *args)
    except SystemExit as exc:  # argparse's usage errors exit through SystemExit
        got, err = exc.code, capsys.readouterr().err
    assert got == code
    assert err.startswith(message) and err.count("\n") == 1
    backfills = firestore_db.collection("runledger_audit").document("scheduler_runs")
    assert list(backfills.collection("backfills").stream()) == []
