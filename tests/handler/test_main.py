"""The deployed entry point, served by functions-framework over real HTTP.

It serves the machinery tests' own jobs (tests.handler.machinery_jobs), not the
example jobs a team replaces.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import requests

from runledger import facts
from runledger.config import contract_env
from scheduler_dedup.localrun.handler_server import start_handler
from tests.handler import machinery_jobs
from tests.handler.support import scheduler_headers, start_main
from tests.stacks import HANDLER_DIR, REPO_ROOT

RECENT = "2026-10-16T12:00:00Z"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
# Only the audit (croniter, its Scheduler listing and pause log), backfills, a dead
# letter's publish, the operator CLI, the overlap slots of a job with a policy and the
# proxy targets (Run and Workflows clients) need these; every cold start of a delivery
# would pay them.
NOT_ON_A_DELIVERY = (
    "croniter",
    "google.cloud.logging",
    "google.cloud.logging_v2",
    "google.cloud.pubsub_v1",
    "google.cloud.scheduler",
    "google.cloud.scheduler_v1",
    "google.cloud.workflows",
    "google.cloud.run",
    "google.cloud.run_v2",
    "runledger.audit",
    "runledger.backfill",
    "runledger.ledger.firestore_overlap",
    "runledger.ledger.overlap",
    "runledger.ops",
    "runledger.targets",
)
# A stack with one scheduled job, so an audit that reads backfill requests: what
# DEDUP_SCHEDULES says of it besides its id and cron line, and the audit's scope.
SCHEDULED = {"timeZone": "UTC", "retryWindowSeconds": 540}
SCOPE = {"DEDUP_ALLOWED_PROJECTS": "acme-prod", "DEDUP_ALLOWED_REGIONS": "europe-west1"}
# A fresh interpreter loads the entry point as functions-framework does and
# answers one delivery of a job that logs; it prints what it imported.
FIRST_DELIVERY = """
import json, sys
from functions_framework import create_app
app = create_app("handle_scheduled_job", "main.py")
answer = app.test_client().post("/", headers=json.loads(sys.argv[1]), data=b"{}")
print(json.dumps({"status": answer.status_code, "body": answer.get_json(),
                  "modules": sorted(sys.modules)}))
"""


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


def test_job_logging_reaches_stdout_as_one_structured_entry_per_line_with_its_run(
    server, firestore_emulator
):
    headers = dict(scheduler_headers(job="machinery-logs", schedule_time=RECENT))
    headers["traceparent"] = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
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
    # Under the request's trace, in the project the stack sets as GOOGLE_CLOUD_PROJECT.
    trace = f"projects/{firestore_emulator.project}/traces/{TRACE_ID}"
    assert job_line["logging.googleapis.com/trace"] == trace
    assert job_line["logging.googleapis.com/sourceLocation"]["function"] == "machinery_logs"


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


@pytest.mark.parametrize(
    ("deployed", "said"),
    [
        (str(facts.CONTRACT_VERSION + 1), f"contract '{facts.CONTRACT_VERSION + 1}'"),
        (str(facts.CONTRACT_VERSION - 1), f"contract '{facts.CONTRACT_VERSION - 1}'"),
        ("", "no contract version (an older program)"),
    ],
)
def test_a_handler_deployed_by_a_program_of_another_contract_refuses_to_start(
    deployed: str, said: str
) -> None:
    result = start_main(DEDUP_CONTRACT_VERSION=deployed)
    assert result.returncode != 0
    assert result.stderr.strip() == (
        f"handler configuration error: DEDUP_CONTRACT_VERSION: this handler speaks contract "
        f"{facts.CONTRACT_VERSION}, but the program that deployed it set {said}; deploy the "
        "program and the handler from one scheduler-dedup version"
    )
    # The program's own version starts (the other settings are defaults).
    assert start_main(DEDUP_CONTRACT_VERSION=str(facts.CONTRACT_VERSION)).returncode == 0


def test_a_first_delivery_imports_nothing_only_the_audit_ops_or_proxy_targets_need(
    firestore_emulator,
):
    """A stack with a schedule (so an audit and backfill requests) and no overlap policy."""
    firestore_emulator.clear()
    headers = json.dumps(dict(scheduler_headers(job="machinery-logs", schedule_time=RECENT)))
    env = os.environ | firestore_emulator.env() | {"PYTHONWARNINGS": "ignore"} | contract_env()
    env |= {
        "DEDUP_RETENTION_SECONDS": str(3650 * 86400),
        "DEDUP_JOBS_MODULE": machinery_jobs.MODULE,
        "DEDUP_SCHEDULES": json.dumps(
            [{"id": "machinery-logs", "schedule": "0 12 * * *", **SCHEDULED}]
        ),
        "PYTHONPATH": os.pathsep.join([str(HANDLER_DIR), str(REPO_ROOT)]),
        **SCOPE,
    }
    done = subprocess.run(
        [sys.executable, "-c", FIRST_DELIVERY, headers],
        cwd=HANDLER_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["status"], result["body"]["outcome"]) == (200, "completed")
    assert "google.cloud.firestore" in result["modules"]  # it did reach the ledger
    loaded = [
        module
        for module in result["modules"]
        if any(module == name or module.startswith(f"{name}.") for name in NOT_ON_A_DELIVERY)
    ]
    assert loaded == []
