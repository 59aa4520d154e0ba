"""A run that outlives its job's attempt deadline says so on its log line.

Scheduler ends the attempt at `attemptDeadline` while the job goes on; the final
log line of such a delivery carries `attempt_deadline_s` and
`outlived_attempt_deadline_s`, which the dashboard counts. The request's duration
is read from the app's monotonic clock (injected), moved here by the job itself.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from runledger.schedules import AuditSettings, parse_schedules, schedules_json
from tests.handler.support import deliver, make_app, scheduler_headers

JOB = "nightly-report"


class Monotonic:
    """A monotonic clock that moves when told, and by `step` at each read."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.step = 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.fixture
def monotonic() -> Monotonic:
    return Monotonic()


def audit(deadline_s: int) -> AuditSettings:
    entry = {
        "id": JOB,
        "schedule": "0 12 * * *",
        "timeZone": "UTC",
        "retryWindowSeconds": 180,
        "attemptDeadlineSeconds": deadline_s,
    }
    schedules = parse_schedules(schedules_json([entry]))
    return AuditSettings(schedules, timedelta(hours=6), "acme-prod", "europe-west1")


def final_line(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    return json.loads(capsys.readouterr().out.splitlines()[-1])


def test_a_run_longer_than_its_attempt_deadline_is_marked(
    firestore_store, clock, monotonic, capsys
) -> None:
    def slow(ctx: object) -> None:
        monotonic.now += 200.25  # the job runs 200 s against a 180 s deadline

    app = make_app(firestore_store, {JOB: slow}, clock, audit=audit(180), monotonic=monotonic)
    response = deliver(app)

    assert (response.status, response.outcome) == (200, "completed")
    line = final_line(capsys)
    assert line["attempt_deadline_s"] == 180
    assert line["outlived_attempt_deadline_s"] == pytest.approx(20.2, abs=0.1)


def test_a_run_within_its_deadline_and_a_duplicate_carry_no_mark(
    firestore_store, clock, monotonic, capsys
) -> None:
    def quick(ctx: object) -> None:
        monotonic.now += 179

    app = make_app(firestore_store, {JOB: quick}, clock, audit=audit(180), monotonic=monotonic)
    deliver(app)
    line = final_line(capsys)
    assert line["outcome"] == "completed"
    assert "outlived_attempt_deadline_s" not in line

    # A duplicate of the completed run does not run the job: nothing outlived anything,
    # however long its answer took (here 300 s at each clock read).
    monotonic.step = 300
    response = app.handle("POST", scheduler_headers(), b"")
    assert response.status == 200
    line = final_line(capsys)
    assert line["outcome"] != "completed" and line["duration_ms"] > 180_000
    assert "outlived_attempt_deadline_s" not in line
