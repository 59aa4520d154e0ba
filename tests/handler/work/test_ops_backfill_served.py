"""A backfill end to end: the operator CLI records it, the served handler's audit job runs it.

The handler is the deployed entry point (`main.py` under functions-framework) on
the emulator, configured from the environment as in the cloud, so this also
checks how the handler finds its backfill requests (`backfill.queue.firestore_backfills`).
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
import requests

from runledger.delivery.identify import run_key
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.record import Status
from runledger.ops.cli import main
from runledger.schedules import AUDIT_JOB_ID
from scheduler_dedup.localrun.handler_server import start_handler
from tests.handler import machinery_jobs
from tests.handler.support import scheduler_headers

SCOPE = {"DEDUP_ALLOWED_PROJECTS": "acme-prod", "DEDUP_ALLOWED_REGIONS": "europe-west1"}
JOB = "machinery-once"
ENTRY = {"id": JOB, "schedule": "0 * * * *", "timeZone": "UTC", "retryWindowSeconds": 200}
# Past times, kept by a retention of ten years whatever the machine's date.
START = datetime(2026, 10, 16, 6, tzinfo=UTC)
RANGE = ["--job", JOB, "--from", "2026-10-16T06:00:00Z", "--to", "2026-10-16T09:00:00Z"]


@pytest.fixture
def env(firestore_emulator) -> dict[str, str]:
    firestore_emulator.clear()
    return (
        firestore_emulator.env()
        | SCOPE
        | {
            "DEDUP_RETENTION_SECONDS": str(3650 * 86400),
            "DEDUP_JOBS_MODULE": machinery_jobs.MODULE,
            "DEDUP_SCHEDULES": json.dumps([ENTRY]),
        }
    )


def ops(env: dict[str, str], *args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    assert main(list(args), env=env, stdout=out, stderr=err) == 0, err.getvalue()
    return out.getvalue()


def audit(server, when: datetime) -> dict:
    """Deliver the audit of `when` as Scheduler would; its summary line."""
    stamp = when.isoformat(timespec="seconds").replace("+00:00", "Z")
    headers = dict(scheduler_headers(job=AUDIT_JOB_ID, schedule_time=stamp))
    answer = requests.post(server.url, headers=headers, data=b"", timeout=120)
    assert (answer.status_code, answer.json()["outcome"]) == (200, "completed")
    lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("outcome") == "audit_summary"][-1]


def test_the_served_handlers_audit_runs_a_recorded_backfill_once(env, firestore_db):
    assert "will run 3 scheduled time(s)" in ops(env, "backfill", *RANGE)
    now = datetime.now(UTC).replace(microsecond=0)
    with start_handler(env) as server:
        first = audit(server, now)
        assert first["backfill"]["ran"] == 3
        assert first["backfill"]["outcomes"] == {"completed": 3}
        lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
        runs = [line for line in lines if line.get("outcome") == "backfill_completed"]
        assert [line["trigger"] for line in runs] == ["backfill"] * 3
        # Asked again: nothing new is recorded, and the next audit runs nothing.
        assert "nothing new written" in ops(env, "backfill", *RANGE)
        second = audit(server, now + timedelta(seconds=1))
        assert (second["backfill"]["runs"], second["backfill"]["ran"]) == (0, 0)
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    for hour in (6, 7, 8):
        key = run_key(JOB, START.replace(hour=hour), "acme-prod", "europe-west1", manual=False)
        record = store.get(key).record
        assert (record.status, record.trigger, record.attempts) == (Status.COMPLETED, "backfill", 1)
