"""Backfill and catch-up of a `skip` or `delay` job while one of its runs works, on the emulator.

A time the audit could not run yet because another run of its job was in
progress stays pending: nothing is recorded for it (never `skipped`: the
operator asked for it, or the audit found it missed), and the next audit runs
it once the holder is done. Each job counts its executions per schedule time.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from runledger.backfill.firestore_store import FirestoreBackfills
from runledger.config import contract_env
from runledger.delivery.identify import run_key
from runledger.ledger.epochs import record_epochs
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.schedules import AUDIT_JOB_ID, audit_settings
from runledger.sdk.context import RunContext
from runledger.service.app import App
from tests.handler.support import (
    LEASE,
    RETENTION,
    T0,
    DrivenRenewals,
    FakeClock,
    deliver,
    scheduler_headers,
    sequential_ids,
    settings,
)
from tests.handler.work.test_ops_backfill import ops, summary

NOW = T0 + timedelta(minutes=30)  # 2026-10-16T12:30:00Z
SCOPE = {"DEDUP_ALLOWED_PROJECTS": "acme-prod", "DEDUP_ALLOWED_REGIONS": "europe-west1"}
HELD = "2026-10-16T12:00:00Z"


def schedules(policy: str, catch_up: bool = False) -> str:
    entry = {
        "id": "export",
        "schedule": "0 * * * *",
        "timeZone": "UTC",
        "retryWindowSeconds": 200,
        "overlap": policy,
        "catchUp": catch_up,
        "catchUpMaxAgeSeconds": 7200,
    }
    return json.dumps([entry])


class HeldExport:
    """`export` counts its runs per hour; the run of 12:00 waits inside for `release`."""

    def __init__(self) -> None:
        self.runs: Counter = Counter()
        self.inside = threading.Event()
        self.release = threading.Event()

    def __call__(self, ctx: RunContext) -> None:
        self.runs[ctx.schedule_time.hour] += 1
        if ctx.schedule_time.hour == 12:
            self.inside.set()
            assert self.release.wait(60), "the test never released the held run"


def app_for(firestore_db, job: HeldExport, env: dict[str, str]) -> App:
    config = audit_settings(env, settings(**SCOPE))
    return App(
        settings(**SCOPE),
        {"export": job},
        lambda: FirestoreRunStore(firestore_db, "scheduler_runs"),
        clock=FakeClock(NOW + timedelta(seconds=3)),
        new_attempt_id=sequential_ids(),
        renewals=DrivenRenewals(),
        overlaps={s.id: s.overlap for s in config.schedules},
        audit=config,
        backfills=lambda: FirestoreBackfills(firestore_db, "scheduler_runs"),
    )


def audit(app: App, capsys, stamp: str) -> list[dict[str, Any]]:
    capsys.readouterr()
    answer = deliver(app, scheduler_headers(job=AUDIT_JOB_ID, schedule_time=stamp))
    assert (answer.status, answer.outcome) == (200, "completed")
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def hold_noon(app: App, job: HeldExport) -> threading.Thread:
    thread = threading.Thread(
        target=lambda: deliver(app, scheduler_headers(job="export", schedule_time=HELD))
    )
    thread.start()
    assert job.inside.wait(60)
    return thread


def key_of(hour: int) -> str:
    return run_key("export", T0.replace(hour=hour), "acme-prod", "europe-west1", manual=False)


WINDOW = ["--job", "export", "--from", "2026-10-16T08:00:00Z", "--to", "2026-10-16T10:00:00Z"]


def backfill_env(firestore_emulator, policy: str) -> dict[str, str]:
    """What `ops backfill` and the handler read: the emulator, the scope, `export`'s policy."""
    return (
        firestore_emulator.env()
        | SCOPE
        | contract_env()
        | {
            "DEDUP_SCHEDULES": schedules(policy),
            "DEDUP_LEASE_SECONDS": str(int(LEASE.total_seconds())),
            "DEDUP_RETENTION_SECONDS": str(int(RETENTION.total_seconds())),
        }
    )


@pytest.mark.parametrize("policy", ["skip", "delay"])
def test_a_backfill_met_by_a_running_holder_stays_pending_and_the_next_audit_runs_it(
    firestore_emulator, firestore_db, capsys, policy
):
    env = backfill_env(firestore_emulator, policy)
    code, _, err = ops(env, "backfill", *WINDOW)
    assert (code, err) == (0, "")
    job = HeldExport()
    app = app_for(firestore_db, job, env)
    thread = hold_noon(app, job)
    first = summary(audit(app, capsys, "2026-10-16T12:30:00Z"))["backfill"]
    assert (first["requests_done"], first["ran"]) == (0, 0)
    assert first["outcomes"] == {"overlap_delayed": 1}
    assert app.ledger.read(key_of(8)) is None  # never `skipped`: the operator asked for it
    job.release.set()
    thread.join(60)
    second = summary(audit(app, capsys, "2026-10-16T12:30:01Z"))["backfill"]
    assert (second["requests_done"], second["ran"]) == (1, 2)
    assert job.runs == Counter({12: 1, 8: 1, 9: 1})
    code, out, _ = ops(env, "backfill", *WINDOW, "--dry-run", "--json")
    assert (code, json.loads(out)) == (0, [])


@pytest.mark.parametrize("policy", ["skip", "delay"])
def test_a_catch_up_met_by_a_running_holder_is_tried_again_by_the_next_audit(
    firestore_emulator, firestore_db, capsys, policy
):
    env = SCOPE | {"DEDUP_SCHEDULES": schedules(policy, catch_up=True)}
    job = HeldExport()
    app = app_for(firestore_db, job, env)
    config = audit_settings(env, settings(**SCOPE))
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    record_epochs(
        store, config.project, config.region, config.schedules, T0 - timedelta(minutes=90)
    )
    thread = hold_noon(app, job)
    lines = audit(app, capsys, "2026-10-16T12:30:00Z")
    caught = {line["schedule_time"]: line.get("catch_up") for line in lines if "catch_up" in line}
    assert caught and set(caught.values()) == {"overlap_delayed"}
    assert app.ledger.read(key_of(11)) is None  # nothing recorded: still missed, not skipped
    job.release.set()
    thread.join(60)
    audit(app, capsys, "2026-10-16T12:30:01Z")
    assert job.runs[11] == 1 and job.runs[12] == 1
    assert set(job.runs.values()) == {1}


@pytest.mark.parametrize("policy", ["skip", "delay"])
def test_a_backfill_waits_for_the_running_holder_and_runs_in_the_same_audit(
    firestore_emulator, firestore_db, capsys, policy
):
    """With the duplicate wait on (the handler's default), the backfill's run waits for the holder.

    The wait's first pause lets the held run finish, so the same audit runs both times.
    """
    env = backfill_env(firestore_emulator, policy)
    assert ops(env, "backfill", *WINDOW)[0] == 0
    job = HeldExport()
    holder: list[threading.Thread] = []
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        job.release.set()
        holder[0].join(60)

    app = App.from_env(
        env,
        FakeClock(NOW + timedelta(seconds=3)),
        jobs={"export": job},
        store_factory=lambda: FirestoreRunStore(firestore_db, "scheduler_runs"),
        renewals=DrivenRenewals(),
        new_attempt_id=sequential_ids(),
        sleep=sleep,
        backfills=lambda: FirestoreBackfills(firestore_db, "scheduler_runs"),
    )
    holder.append(hold_noon(app, job))
    lines = audit(app, capsys, "2026-10-16T12:30:00Z")
    backfill = summary(lines)["backfill"]
    assert (backfill["requests_done"], backfill["outcomes"]) == (1, {"completed": 2})
    assert len(pauses) == 1  # one poll: the holder was done
    assert job.runs == Counter({12: 1, 8: 1, 9: 1})


@pytest.mark.parametrize("policy", ["skip", "delay"])
def test_a_backfill_time_done_since_the_request_is_done_while_another_run_holds_the_job(
    firestore_emulator, firestore_db, capsys, policy
):
    """A time the request asked for and that ran since (a late retry) is a duplicate, not pending.

    Met while another run of the job works, it must not wait behind that holder: the request
    would stay on it at every audit of a job that is nearly always busy, and its later times
    never run.
    """
    env = backfill_env(firestore_emulator, policy)
    assert ops(env, "backfill", *WINDOW)[0] == 0
    job = HeldExport()
    app = app_for(firestore_db, job, env)
    late = deliver(app, scheduler_headers(job="export", schedule_time="2026-10-16T08:00:00Z"))
    assert (late.status, late.outcome) == (200, "completed")
    thread = hold_noon(app, job)
    first = summary(audit(app, capsys, "2026-10-16T12:30:00Z"))["backfill"]
    assert first["outcomes"] == {"duplicate_completed": 1, "overlap_delayed": 1}
    job.release.set()
    thread.join(60)
    second = summary(audit(app, capsys, "2026-10-16T12:30:01Z"))["backfill"]
    assert (second["requests_done"], second["outcomes"]) == (1, {"completed": 1})
    assert job.runs == Counter({12: 1, 8: 1, 9: 1})
