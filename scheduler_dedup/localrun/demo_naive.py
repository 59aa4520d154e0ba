"""A handler without a run ledger, for `make demo ARGS=--without-dedup`.

It runs the same demo jobs for every delivery it gets, as a target that
trusts Cloud Scheduler to deliver once would. Serving it in place of the
real handler shows what the ledger prevents: the invariant fails, with the
runs whose work was done twice or concurrently listed. It is never deployed.
"""

from __future__ import annotations

import os
import uuid
from typing import Any, cast

import flask
import functions_framework

from runledger import RunContext
from runledger.config import JOBS_MODULE_ENV
from runledger.delivery.identify import MANUAL_TOLERANCE, parse_schedule_time
from runledger.exceptions import BadRequest
from runledger.facts import JOB_HEADER, SCHEDULE_HEADER
from runledger.sdk.registry import load_jobs
from scheduler_dedup.localrun.demo_clock import clock_from_env

# The demo's clock: shifted when a test pins the demo's "now"
# (`scheduler_dedup.localrun.demo_clock`).
CLOCK = clock_from_env()
JOBS = load_jobs(os.environ.get(JOBS_MODULE_ENV, "scheduler_dedup.localrun.demo_jobs"))


class _NoLease:
    """Nothing guards the run, so nothing can be lost either."""

    def held(self) -> bool:
        return True


@functions_framework.http
def handle_without_ledger(request: flask.Request) -> Any:
    job = request.headers.get(JOB_HEADER, "")
    try:
        schedule_time = parse_schedule_time(request.headers.get(SCHEDULE_HEADER, ""))
    except BadRequest as exc:
        return flask.jsonify(outcome="rejected", message=exc.reason), 400
    if job not in JOBS:
        return flask.jsonify(outcome="rejected", message=f"unknown job {job!r}"), 404
    context = RunContext(
        run_id=f"{job}/{schedule_time.isoformat()}",
        job_name=job,
        schedule_time=schedule_time,
        attempt_id=uuid.uuid4().hex,
        project="",
        region="",
        manual=schedule_time > CLOCK() + MANUAL_TOLERANCE,
        body=request.get_data(),
        _lease=cast(Any, _NoLease()),
    )
    try:
        JOBS[job](context)
    except Exception as exc:
        return flask.jsonify(outcome="failed_retryable", message=str(exc)), 500
    return flask.jsonify(outcome="completed", message="run processed (no ledger)"), 200
