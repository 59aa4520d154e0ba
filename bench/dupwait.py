"""What an in-progress duplicate's wait for the holder's outcome costs (handler only).

The baseline answers such a duplicate at once, so there is nothing to pair.
Each scenario claims a run as a holder that does not finish (uncounted), then
times one duplicate, in process, on the counted client, with real sleeps:

- the holder completes HOLDER_S after the claim: the duplicate sees it at its
  next poll and answers 200 (the default budget, far longer, is not reached);
- the holder runs on: the wait ends at its cap (DEDUP_DUPLICATE_WAIT_SECONDS =
  CAP_S) and the duplicate answers 409.

The request's wall time is what it costs in instance time: with one request
per instance (`concurrency: 1`, the template's default) that instance serves
nothing else meanwhile. Reads are the claim's own read plus one per poll.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from google.cloud import firestore

from bench.schedule import JOB, ScheduleTimes, delivery_headers
from bench.summary import Spread
from runledger.config import Settings
from runledger.delivery.duplicate_wait import DuplicateWait
from runledger.delivery.identify import identify_run
from runledger.facts import DEFAULT_ATTEMPT_DEADLINE_S
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.run import Claim
from runledger.sdk.registry import load_jobs
from runledger.service.app import App
from scheduler_dedup.localrun.rpccount import RpcCounter

DEFAULT_DEADLINE = timedelta(seconds=DEFAULT_ATTEMPT_DEADLINE_S)
HOLDER_S = 1.0
CAP_S = 4.0
COMPLETES = f"holder completes {HOLDER_S:g} s after the claim"
RUNS_ON = f"holder runs on; wait capped at {CAP_S:g} s"
SCENARIOS = (COMPLETES, RUNS_ON)
EXPECTED_STATUS = {COMPLETES: 200, RUNS_ON: 409}


@dataclass(frozen=True)
class WaitSample:
    status: int
    outcome: str
    seconds: float  # the duplicate's request, first byte in to answer out
    reads: int  # document reads: the claim's, then one per poll
    rpcs: int


def measure_wait(
    settings: Settings,
    counted: firestore.Client,
    setup: firestore.Client,
    rpc: RpcCounter,
    scenario: str,
    times: ScheduleTimes,
) -> WaitSample:
    jobs = load_jobs(settings.jobs_module)
    headers = delivery_headers(times.next())
    holder = App(settings, jobs, lambda: FirestoreRunStore(setup, settings.collection))
    claim = holder.ledger.claim(identify_run(headers, settings, jobs, datetime.now(UTC)))
    assert isinstance(claim, Claim), "a fresh schedule time must be claimable"
    cap = timedelta(seconds=CAP_S) if scenario == RUNS_ON else None
    duplicate = App(
        settings,
        jobs,
        lambda: FirestoreRunStore(counted, settings.collection),
        # The bench job with Scheduler's default attempt deadline, as DEDUP_SCHEDULES gives it.
        duplicate_wait=DuplicateWait({JOB: DEFAULT_DEADLINE}, settings.lease, cap),
    )
    finish = (
        threading.Timer(HOLDER_S, holder.ledger.complete, [claim])
        if scenario == COMPLETES
        else None
    )
    if finish is not None:
        finish.start()
    rpc.reset()
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # App logs a line per request
        response = duplicate.handle("POST", headers, b"")
    seconds = time.perf_counter() - started
    if finish is not None:
        finish.join()
    reads = rpc.calls["batch_get_documents"] + rpc.calls["get_document"]
    return WaitSample(response.status, response.outcome, seconds, reads, rpc.total)


def section(
    data: dict[str, dict[str, list[dict[str, Any]]]] | None,
    table: Callable[[list[str], list[list[str]]], str],
) -> str:
    """The report's rows: one per scenario, the last repetition's reads, seconds as a spread."""
    if not data:
        return ""
    rows = []
    for scenario in SCENARIOS:
        samples = data[scenario]["handler"]
        seconds = Spread.of([s["seconds"] for s in samples])
        last = samples[-1]
        polls = last["reads"] - 1
        rows.append(
            [
                scenario,
                f"{last['status']} {last['outcome']}",
                f"{seconds.median:.2f} [{seconds.low:.2f}-{seconds.high:.2f}]",
                f"{last['reads']} (1 + {polls} polls)",
                f"{polls / last['seconds']:.2f}",
                str(last["rpcs"]),
            ]
        )
    header = [
        "in-progress duplicate",
        "answer",
        "instance s (request wall time)",
        "doc reads",
        "poll reads per waited s",
        "RPCs",
    ]
    title = (
        "**Duplicate wait**: one in-progress duplicate waiting for the holder's outcome "
        "(handler only; in process, real sleeps)"
    )
    return title + "\n\n" + table(header, rows)
