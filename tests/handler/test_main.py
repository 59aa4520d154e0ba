"""The deployed entry point, served by functions-framework over real HTTP.

It serves the machinery tests' own jobs (tests.handler.machinery_jobs), not the
example jobs a team replaces.
"""

from __future__ import annotations

import json

import pytest
import requests

from localrun.handler_server import start_handler
from tests.handler import machinery_jobs
from tests.handler.support import scheduler_headers, start_main

RECENT = "2026-10-16T12:00:00Z"


@pytest.fixture
def server(firestore_emulator):
    firestore_emulator.clear()
    env = firestore_emulator.env() | {
        "DEDUP_RETENTION_SECONDS": str(3650 * 86400),
        "DEDUP_JOBS_MODULE": machinery_jobs.MODULE,
    }
    with start_handler(env) as running:
        yield running


def test_served_handler_completes_once_then_answers_duplicates(server, firestore_db):
    headers = dict(scheduler_headers(job="machinery-once", schedule_time=RECENT))
    first = requests.post(server.url, headers=headers, data=b"{}", timeout=30)
    assert first.status_code == 200
    assert first.json()["outcome"] == "completed"
    lower = {name.lower(): value for name, value in headers.items()}
    again = requests.post(server.url, headers=lower, data=b"{}", timeout=30)
    assert (again.status_code, again.json()["outcome"]) == (200, "duplicate_completed")
    documents = [doc.to_dict() for doc in firestore_db.collection("scheduler_runs").stream()]
    assert [doc["status"] for doc in documents] == ["completed"]


def test_job_logging_reaches_stdout_as_one_structured_entry_per_line_with_its_run(server):
    headers = dict(scheduler_headers(job="machinery-logs", schedule_time=RECENT))
    answer = requests.post(server.url, headers=headers, data=b"{}", timeout=30)
    assert answer.status_code == 200
    entries = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    handler_line = next(e for e in entries if e.get("outcome") == "completed")
    job_lines = [e for e in entries if e.get("message", "").startswith("machinery job at")]
    assert len(job_lines) == 1
    job_line = job_lines[0]
    assert job_line["severity"] == "INFO"
    assert job_line["message"] == "machinery job at 2026-10-16T12:00:00+00:00"
    # The same field names as the handler's own line: one filter finds the run's lines.
    for field in ("run_key", "job", "schedule_time", "attempt_id"):
        assert job_line[field] == handler_line[field]
    assert job_line["job"] == "machinery-logs"
    assert job_line["logging.googleapis.com/labels"]["python_logger"] == machinery_jobs.MODULE


def test_served_handler_refuses_get_and_unknown_jobs(server):
    assert requests.get(server.url, timeout=30).status_code == 405
    unknown = dict(scheduler_headers(job="not-registered", schedule_time=RECENT))
    response = requests.post(server.url, headers=unknown, timeout=30)
    assert response.status_code == 404
    assert "unknown job" in response.json()["message"]


def test_bad_setting_stops_start_up_with_one_line_naming_the_variable():
    result = start_main(DEDUP_LEASE_SECONDS="soon")
    assert result.returncode != 0
    assert result.stderr.strip() == (
        "handler configuration error: DEDUP_LEASE_SECONDS: 'soon' is not a positive "
        "whole number of seconds"
    )
