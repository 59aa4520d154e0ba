"""Concurrent requests in one handler process: the app is thread-safe.

The stack serves several deliveries per instance (`concurrency`, THREADS for
functions-framework's threads). Here one served handler takes runs that can
only finish while all of them are inside their job at once, each delivered
twice at the same moment: every run executes exactly once, every copy gets one
answer, and every request writes one whole structured log line.
"""

from __future__ import annotations

import collections
import concurrent.futures
from pathlib import Path

import pytest

from runledger.ledger.record import Status
from scheduler_dedup.localrun.emulator import FirestoreEmulator
from tests.reliability.faultjobs import BARRIER
from tests.reliability.relsupport import (
    Servers,
    completed_work,
    deliver,
    effects,
    log_entries,
    probe_key,
    probe_run,
    run_headers,
    schedule_time_now,
    server_env,
)

COLLECTION = "rel_concurrency"
RUNS = 8
COPIES = 2


@pytest.mark.firestore
@pytest.mark.timeout(280)
def test_concurrent_deliveries_run_each_job_once_with_one_answer_and_log_line_each(
    clean_emulator: FirestoreEmulator, fault_dir: Path, servers: Servers
) -> None:
    env = server_env(clean_emulator, fault_dir, COLLECTION, lease_s=60)
    # The barrier waits up to REL_PAUSE_LIMIT_S for all runs to be inside it: a loaded
    # machine may take a while to bring 16 requests through the claim.
    barrier = {"REL_BARRIER_N": str(RUNS), "REL_PAUSE_LIMIT_S": "150"}
    server = servers.start(env | {"THREADS": str(RUNS * COPIES)} | barrier)
    store = probe_run(clean_emulator, COLLECTION).store
    times = [schedule_time_now(-index) for index in range(RUNS)]
    requests = [run_headers("barrier", when) for when in times for _ in range(COPIES)]

    with concurrent.futures.ThreadPoolExecutor(len(requests)) as pool:
        replies = list(
            pool.map(lambda headers: deliver(server.url, headers, timeout_s=200), requests)
        )

    by_run = collections.defaultdict(list)
    for headers, reply in zip(requests, replies, strict=True):
        by_run[dict(headers)["X-CloudScheduler-ScheduleTime"]].append((reply.status, reply.outcome))
    for when in times:
        answers = sorted(by_run[when])
        assert answers.count((200, "completed")) == 1, (when, answers)
        assert set(answers) - {(200, "completed")} <= {
            (409, "duplicate_in_progress"),
            (200, "duplicate_completed"),
        }, answers
        record = store.get(probe_key("barrier", when))
        assert record is not None
        assert (record.record.status, record.record.attempts) == (Status.COMPLETED, 1)
    # All RUNS jobs were inside their work at once (else the barrier fails them), once each.
    assert len(effects(fault_dir, BARRIER)) == RUNS
    assert sorted(run for run, _ in completed_work(fault_dir)) == sorted(
        probe_key("barrier", when) for when in times
    )
    lines = [entry for entry in log_entries(server.log()) if entry.get("job") == "barrier"]
    assert len(lines) == len(requests), "one whole JSON line per request"
