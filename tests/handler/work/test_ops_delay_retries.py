"""A delayed time whose retries ran out at the next scheduled time is reported then.

Scheduler retries a time "retry_count times, or until the next scheduled execution
time, whichever comes first" (RetryConfig). An `overlap: delay` job's delayed time
waits in those retries (each delivery answered 409, nothing written), so once the
next time comes they are over: `ops audit` and `ops describe` report it `missed`
from then (plus the lease), not a whole retry window later. The same config with
`overlap: allow` keeps waiting for the retry window, as before.
"""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest

from runledger.delivery.identify import run_key
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.record import Status
from runledger.ops.cli import main
from tests.handler.support import RETENTION, T0, run_record

JOB = "report"
LEASE_S = 300
# 12:10 is when 12:05's retries end (the next time); then the lease and the skew margin.
AFTER = T0 + timedelta(minutes=10, seconds=LEASE_S + 10)


def schedules(overlap: str) -> str:
    entry = {
        "id": JOB,
        "schedule": "*/5 * * * *",
        "timeZone": "UTC",
        "retryWindowSeconds": 3600,
        "overlap": overlap,
    }
    return json.dumps([entry])


@pytest.fixture
def env(firestore_emulator, firestore_db) -> dict[str, str]:
    """12:00 ran (the long run 12:05 was delayed behind); 12:05 has no record."""
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    record = run_record(
        "first", Status.COMPLETED, job=JOB, schedule_time=T0, expire_at=T0 + RETENTION
    )
    store.create(run_key(JOB, T0, "acme-prod", "europe-west1", manual=False), record)
    return firestore_emulator.env() | {
        "DEDUP_ALLOWED_PROJECTS": "acme-prod",
        "DEDUP_ALLOWED_REGIONS": "europe-west1",
        "DEDUP_LEASE_SECONDS": str(LEASE_S),
        "DEDUP_RETENTION_SECONDS": str(int(RETENTION.total_seconds())),
    }


def ops(env: dict[str, str], overlap: str, *argv: str) -> tuple[int, object]:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        list(argv),
        env=env | {"DEDUP_SCHEDULES": schedules(overlap)},
        clock=lambda: AFTER,
        stdout=out,
        stderr=err,
    )
    return code, json.loads(out.getvalue())


def test_audit_reports_the_delayed_time_once_the_next_time_came(env) -> None:
    code, findings = ops(env, "delay", "audit", "--since", "16m", "--json")

    assert code == 1
    found = [(item["schedule_time"], item["finding"]) for item in findings]
    # 12:10's own retries run until 12:15: not judged yet.
    assert found == [("2026-10-16T12:05:00Z", "missed")]


def test_describe_says_missed_for_delay_and_pending_for_allow(env) -> None:
    for overlap, expected in (("delay", "missed"), ("allow", "pending")):
        code, view = ops(env, overlap, "describe", "--job", JOB, "--json")
        assert code == 0
        statuses = {item["schedule_time"]: item["status"] for item in view["recent"]}
        assert statuses["2026-10-16T12:00:00Z"] == "completed"
        assert statuses["2026-10-16T12:05:00Z"] == expected, overlap


def test_with_allow_the_audit_still_waits_for_the_retry_window(env) -> None:
    code, findings = ops(env, "allow", "audit", "--since", "16m", "--json")

    assert (code, findings) == (0, [])
