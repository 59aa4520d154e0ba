"""The operators' CLI on the emulator: listings, watchdog and dead-letter views, release."""

from __future__ import annotations

import io
import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.record import RunRecord, Status
from runledger.ledger.run import RunIdentity
from runledger.ledger.workitem import WorkItem, WorkKind
from runledger.ops.cli import EXIT_DECLINED, EXIT_ERROR, EXIT_OK, main
from runledger.ops.ledger_ops import is_dead_letter, is_stale
from tests.clitools import run_ops
from tests.handler.support import RETENTION, T0, make_ledger, run_record

ROOT = Path(__file__).resolve().parents[2]
NOW = T0 + timedelta(hours=3)


def record(
    job: str,
    hours: int,
    status: Status,
    *,
    lease_left: timedelta = timedelta(minutes=5),
    error: str | None = None,
    expire_at=None,
) -> RunRecord:
    scheduled = T0 + timedelta(hours=hours)
    return run_record(
        f"{job}-{hours}",
        status,
        lease_expires=NOW + lease_left,
        expire_at=expire_at or scheduled + RETENTION,
        job=job,
        schedule_time=scheduled,
        claimed_at=scheduled,
        error=error,
    )


def key(n: int) -> str:
    return f"{n:02d}" * 32


@pytest.fixture
def seeded(firestore_store):
    """Runs of two jobs in every state, one of them past its TTL."""
    firestore_store.create(key(1), record("etl", 0, Status.COMPLETED))
    firestore_store.create(
        key(2), record("etl", 1, Status.FAILED, error="TerminalJobError: bad schema")
    )
    firestore_store.create(
        key(3), record("etl", 2, Status.IN_PROGRESS, lease_left=-timedelta(minutes=1))
    )
    firestore_store.create(key(4), record("etl", 3, Status.IN_PROGRESS))
    firestore_store.create(
        key(5), record("report", 0, Status.FAILED, error="TerminalJobError: no data")
    )
    firestore_store.create(
        key(6), record("report", 1, Status.RELEASED, error="ConnectionError: reset")
    )
    expired = record("report", -30, Status.FAILED, error="old", expire_at=NOW - timedelta(hours=1))
    firestore_store.create(key(7), expired)
    return firestore_store


def ops(*argv: str, stdin: str = "", project: str = "demo-dedup") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        [*argv, "--project", project],
        env=dict(os.environ),
        clock=lambda: NOW,
        stdin=io.StringIO(stdin),
        stdout=out,
        stderr=err,
    )
    return code, out.getvalue(), err.getvalue()


def keys_in(text: str) -> list[str]:
    runs = json.loads(text)  # one JSON list, as `audit --json` prints
    assert isinstance(runs, list)
    return [run["key"] for run in runs]


def test_list_by_job_and_status_newest_first(seeded):
    code, out, _ = ops("list", "--job", "etl", "--json")
    assert code == EXIT_OK
    assert keys_in(out) == [key(4), key(3), key(2), key(1)]
    code, out, _ = ops("list", "--status", "failed", "--json")
    assert keys_in(out) == [key(2), key(5)]  # key 7 is past its TTL
    code, out, _ = ops("list", "--status", "failed", "--include-expired", "--json")
    assert sorted(keys_in(out)) == [key(2), key(5), key(7)]
    code, out, _ = ops("list", "--job", "etl", "--status", "completed", "--json")
    assert keys_in(out) == [key(1)]


def test_listings_with_no_match_print_an_empty_json_list(seeded):
    for command in (
        ["list", "--job", "nope"],
        ["stale", "--job", "report"],
        ["failed", "--job", "x"],
    ):
        code, out, _ = ops(*command, "--json")
        assert (code, json.loads(out)) == (EXIT_OK, []), command


def test_the_ledger_is_found_where_the_handlers_env_says(seeded):
    out, err = io.StringIO(), io.StringIO()
    env = {**os.environ, "DEDUP_COLLECTION": "elsewhere"}
    code = main(
        ["list", "--json", "--project", "demo-dedup"],
        env=env,
        clock=lambda: NOW,
        stdout=out,
        stderr=err,
    )
    assert (code, json.loads(out.getvalue())) == (EXIT_OK, [])
    assert len(keys_in(ops("list", "--json", "--include-expired")[1])) == 7


def test_list_as_a_table_with_a_limit(seeded):
    code, out, _ = ops("list", "--limit", "2")
    lines = out.splitlines()
    assert code == EXIT_OK
    assert lines[0].split()[:4] == ["KEY", "JOB", "SCHEDULED", "STATUS"]
    assert lines[1].startswith(key(4)[:16])
    assert lines[-1] == "... 4 more (raise --limit)"


def test_stale_is_the_watchdog_view(seeded):
    code, out, _ = ops("stale", "--json")
    assert (code, keys_in(out)) == (EXIT_OK, [key(3)])
    assert "lease ran out" in ops("stale")[1]
    assert ops("stale", "--job", "report")[1].strip() == "no stale runs"


def test_failed_lists_the_dead_letters_with_their_reasons(seeded):
    code, out, _ = ops("failed")
    assert code == EXIT_OK
    assert "TerminalJobError: bad schema" in out
    assert "TerminalJobError: no data" in out
    assert key(7)[:16] not in out
    assert keys_in(ops("failed", "--job", "report", "--json")[1]) == [key(5)]


def test_show_a_run_with_its_work_by_key_prefix(seeded):
    version = seeded.get(key(2)).version
    item = WorkItem(
        WorkKind.CHECKPOINT, "extract", {"rows": 3}, key(2), "etl", "etl-1", T0, T0 + RETENTION
    )
    seeded.create_item_fenced(key(2), version, {"attempts": 1}, item)
    code, out, _ = ops("show", key(2)[:10], "--json")
    shown = json.loads(out)
    assert code == EXIT_OK
    assert (shown["key"], shown["status"], shown["error"]) == (
        key(2),
        "failed",
        "TerminalJobError: bad schema",
    )
    assert shown["work"][0]["name"] == "extract"
    assert shown["work"][0]["value"] == {"rows": 3}
    code, out, _ = ops("show", key(2))
    assert "checkpoint extract" in " ".join(out.split())


def test_release_dry_run_writes_nothing(seeded):
    before = seeded.get(key(2))
    code, out, _ = ops("release", key(2), "--dry-run")
    assert code == EXIT_OK
    assert out.startswith("dry run, nothing written: would release run")
    assert seeded.get(key(2)).version == before.version


def test_release_asks_and_a_no_leaves_the_run_failed(seeded):
    code, _, err = ops("release", key(2), stdin="n\n")
    assert code == EXIT_DECLINED
    assert "[y/N]" in err
    assert "not released" in err
    assert seeded.get(key(2)).record.status is Status.FAILED
    assert ops("release", key(2), stdin="")[0] == EXIT_DECLINED  # end of input is a no


def test_release_after_yes_lets_the_next_delivery_redo_the_run(seeded, firestore_db):
    code, out, _ = ops("release", key(2), stdin="y\n")
    assert code == EXIT_OK
    assert "released run" in out
    released = seeded.get(key(2)).record
    assert (released.status, released.error) == (Status.RELEASED, "TerminalJobError: bad schema")
    raw = firestore_db.collection("scheduler_runs").document(key(2)).get().to_dict()
    assert raw["released_by"].startswith("runledger.ops by ")
    ledger = make_ledger(seeded, lambda: NOW, new_attempt_id=lambda: "redo")
    identity = RunIdentity(
        key(2), "etl", T0 + timedelta(hours=1), "acme-prod", "europe-west1", False
    )
    claim = ledger.claim(identity)
    assert (claim.attempt_id, claim.attempts) == ("redo", 2)


def test_release_can_clear_checkpoints_but_keeps_outputs(seeded):
    version = seeded.get(key(2)).version
    for kind, name in [(WorkKind.CHECKPOINT, "a"), (WorkKind.OUTPUT, "report")]:
        item = WorkItem(kind, name, 1, key(2), "etl", "etl-1", T0, T0 + RETENTION)
        version = seeded.create_item_fenced(key(2), version, {"attempts": 1}, item)
    code, _, _ = ops("release", key(2), "--clear-checkpoints", "--yes")
    assert code == EXIT_OK
    assert set(seeded.get_items(key(2), ["checkpoint:a", "output:report"])) == {"output:report"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", key(9)], f"error: no run with key {key(9)}"),
        (["show", "zz"], "error: 'zz' is not a run key or a prefix of at least 8 hex digits"),
        (["release", key(1), "--yes"], "not failed: nothing to release"),
        (["release", key(3), "--yes"], "is in_progress, not failed"),
        (["release", key(7), "--yes"], "past its expire_at"),
    ],
)
def test_errors_are_one_line(seeded, argv, message):
    code, out, err = ops(*argv)
    assert code == EXIT_ERROR
    assert out == ""
    assert err.count("\n") == 1
    assert message in err


def test_release_refuses_a_run_that_changed_since_it_was_read(seeded, monkeypatch):
    from runledger.ops import ledger_ops as ledgerops

    original = ledgerops.LedgerOps.plan_release

    def plan_then_change(self, key_, now, clear):
        plan = original(self, key_, now, clear)
        seeded.update(key(2), {"attempts": 5}, plan.row.version)  # someone else moved first
        return plan

    monkeypatch.setattr(ledgerops.LedgerOps, "plan_release", plan_then_change)
    code, _, err = ops("release", key(2), "--yes")
    assert code == EXIT_ERROR
    assert "changed since it was read; nothing released" in err
    assert seeded.get(key(2)).record.status is Status.FAILED


def test_the_emulator_needs_a_project(firestore_emulator):
    err = io.StringIO()
    env = {"FIRESTORE_EMULATOR_HOST": firestore_emulator.host}
    code = main(["list"], env=env, stdout=io.StringIO(), stderr=err)
    assert code == EXIT_ERROR
    assert err.getvalue() == (
        "error: FIRESTORE_EMULATOR_HOST is set: give --project (any id the emulator uses)\n"
    )


def test_a_prefix_matching_two_runs_is_ambiguous(firestore_store):
    firestore_store.create("ab" * 32, record("etl", 0, Status.FAILED))
    firestore_store.create("ab" * 31 + "cd", record("etl", 1, Status.FAILED))
    code, _, err = ops("show", "abababab")
    assert code == EXIT_ERROR
    assert "more than one run key starts with abababab" in err


def test_without_credentials_the_cli_says_so_in_one_line(tmp_path):
    done = run_ops(
        "list",
        "--project",
        "acme-prod",
        env={
            "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "missing.json"),
            "HOME": str(tmp_path),
            "NO_GCE_CHECK": "True",
        },
    )
    assert done.returncode == EXIT_ERROR
    assert done.stdout == ""
    assert done.stderr.startswith("error: no application-default credentials")
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1


def test_the_module_runs_against_the_emulator(seeded, firestore_emulator):
    project = firestore_emulator.project
    env = firestore_emulator.env()
    done = run_ops("list", "--include-expired", "--json", "--project", project, env=env)
    assert done.returncode == EXIT_OK, done.stderr
    assert sorted(keys_in(done.stdout)) == [key(n) for n in range(1, 8)]
    # By the real clock these runs are past their TTL: no dead letters to show.
    done = run_ops("failed", "--project", project, env=env)
    assert (done.returncode, done.stdout) == (EXIT_OK, "no failed runs\n")


def test_the_time_rules_are_pure():
    assert is_stale(record("etl", 0, Status.IN_PROGRESS, lease_left=-MAX_CLOCK_SKEW), NOW)
    assert not is_stale(record("etl", 0, Status.IN_PROGRESS, lease_left=-timedelta(seconds=1)), NOW)
    assert not is_stale(record("etl", 0, Status.RELEASED, lease_left=-timedelta(hours=1)), NOW)
    assert is_dead_letter(record("etl", 0, Status.FAILED), NOW)
    assert not is_dead_letter(record("etl", 0, Status.FAILED, expire_at=NOW), NOW)
