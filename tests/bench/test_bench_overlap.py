"""`make bench`'s overlap rows: a job with `allow` reads nothing more, one with a policy one slot.

The same measurement the bench runs, on the session's emulator, with its counts asserted.
"""

from __future__ import annotations

import pytest
from google.cloud import firestore

from bench import overlap
from bench.opcount import OpCounter
from bench.report import Report
from bench.runner import LEASE_SECONDS, RETENTION_SECONDS, Samples
from bench.schedule import ScheduleTimes
from runledger.config import Settings
from scheduler_dedup.localrun.rpccount import RpcCounter


@pytest.mark.firestore
def test_allow_reads_nothing_more_and_a_policy_reads_its_slot_once(firestore_db):
    settings = Settings.from_env(
        {
            "DEDUP_LEASE_SECONDS": str(LEASE_SECONDS),
            "DEDUP_RETENTION_SECONDS": str(RETENTION_SECONDS),
            "DEDUP_JOBS_MODULE": "bench.bench_jobs",
        }
    )
    counted = firestore.Client(project=firestore_db.project)
    counters = (RpcCounter().attach(counted), OpCounter().attach(counted))
    times = ScheduleTimes()
    samples = Samples(config={}, machine={})
    got = {}
    for scenario in overlap.SCENARIOS:
        cost = overlap.measure(settings, counted, firestore_db, counters, scenario, times)
        got[scenario] = cost
        samples.add("overlap", scenario, "handler", cost.__dict__)
    per = overlap.DELIVERIES
    assert (got["allow"].outcome, got["allow"].reads) == ("completed", 0)
    for policy in ("skip", "delay"):
        assert (got[policy].outcome, got[policy].reads) == ("completed", per)
        # The slot rides in the run's own commits: as many RPCs as allow, plus the one read.
        assert got[policy].rpcs == got["allow"].rpcs + per
    yielding = got[overlap.YIELDING]
    assert (yielding.outcome, yielding.reads, yielding.writes) == ("overlap_skipped", per, per)
    table = Report(samples)._table
    text = overlap.section(samples.data["overlap"], table)
    assert "| allow | completed | 0 |" in text
    assert "| skip | completed | 1 |" in text
