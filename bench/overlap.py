"""What a job's overlap policy costs a delivery (handler only): documents read and written.

Each scenario delivers, in process on the counted client, fresh schedule times of
one job that end before the next arrives, so no run overlaps: `allow` takes the
plain ledger path, `skip` and `delay` read the job's slot once and write it in the
commits the run makes anyway (`runledger.ledger.overlap`). The last row delivers a time
while an uncounted holder of another time of the job is running: it is skipped.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.cloud import firestore

from bench.opcount import OpCounter
from bench.schedule import JOB, ScheduleTimes, delivery_headers
from runledger.config import Settings
from runledger.delivery.identify import identify_run
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.run import Claim
from runledger.sdk.registry import load_jobs
from runledger.service.app import App
from scheduler_dedup.localrun.rpccount import RpcCounter

YIELDING = "skip, another run in progress"
SCENARIOS = ("allow", "skip", "delay", YIELDING)
DELIVERIES = 5


@dataclass(frozen=True)
class OverlapSample:
    outcome: str
    deliveries: int
    reads: int
    writes: int
    rpcs: int


def measure(
    settings: Settings,
    counted: firestore.Client,
    setup: firestore.Client,
    counters: tuple[RpcCounter, OpCounter],
    scenario: str,
    times: ScheduleTimes,
) -> OverlapSample:
    jobs = load_jobs(settings.jobs_module)
    policy = "skip" if scenario == YIELDING else scenario
    collection = f"overlap_{policy}_runs"

    def app(client: firestore.Client) -> App:
        store = FirestoreRunStore(client, collection)
        return App(settings, jobs, lambda: store, overlaps={JOB: policy})

    holder_app, claim = app(setup), None
    if scenario == YIELDING:
        run = identify_run(delivery_headers(times.next()), settings, jobs, datetime.now(UTC))
        claim = holder_app.ledger.claim(run)
        assert isinstance(claim, Claim), "a fresh schedule time of a free job must be claimable"
    counted_app = app(counted)
    rpc, ops = counters
    rpc.reset()
    ops.reset()
    outcomes = set()
    with contextlib.redirect_stdout(io.StringIO()):  # App logs a line per request
        for _ in range(DELIVERIES):
            outcomes.add(counted_app.handle("POST", delivery_headers(times.next()), b"").outcome)
    sample = OverlapSample(
        ", ".join(sorted(outcomes)), DELIVERIES, ops.reads, ops.writes, rpc.total
    )
    if claim is not None:
        holder_app.ledger.complete(claim)
    return sample


def section(
    data: dict[str, dict[str, list[dict[str, Any]]]] | None,
    table: Callable[[list[str], list[list[str]]], str],
) -> str:
    """One row per scenario: per-delivery reads, writes and RPCs of the last repetition."""
    if not data:
        return ""
    rows = []
    for scenario in SCENARIOS:
        last = data[scenario]["handler"][-1]
        per = last["deliveries"]
        rows.append(
            [
                scenario,
                last["outcome"],
                f"{last['reads'] / per:g}",
                f"{last['writes'] / per:g}",
                f"{last['rpcs'] / per:g}",
            ]
        )
    header = [
        "overlap policy",
        "answer",
        "doc reads / delivery",
        "doc writes / delivery",
        "RPCs / delivery",
    ]
    title = (
        "**Overlap policy**: what a job's `overlap` costs each delivery "
        f"(handler only; in process, {DELIVERIES} deliveries of fresh times each)"
    )
    return title + "\n\n" + table(header, rows)
