"""The benchmark code itself runs end to end and reports sane values.

A tiny configuration of the real suite (both served processes, every metric,
one repetition) against the session's emulator; the measurements themselves
stay out of `make test` and run with `make bench`.
"""

from __future__ import annotations

import pytest

from bench.report import Report
from bench.rpcs import DUP_COMPLETED, DUP_IN_PROGRESS, FIRST, RECLAIM
from bench.runner import BenchConfig, run_bench

TINY = BenchConfig(
    reps=1,
    contention_sizes=(2,),
    stream_requests=10,
    throughput_clients=(2,),
    throughput_requests=10,
    in_process_requests=5,
    floor_requests=5,
    coldstart_reps=1,
    coldstart_per_rep=1,
    warmup_deliveries=4,
    growth=((2, 2),),
)


@pytest.mark.firestore
def test_bench_runs_end_to_end_with_sane_numbers(firestore_emulator):
    samples = run_bench(TINY, emulator=firestore_emulator, progress=lambda _: None)
    rpcs = samples.data["rpcs"]

    assert rpcs[FIRST]["handler"][0]["rpcs"] <= 2
    assert rpcs[FIRST]["baseline"][0]["rpcs"] == 6
    assert rpcs[DUP_COMPLETED]["baseline"][0]["rpcs"] == 3
    for side in ("handler", "baseline"):
        assert rpcs[FIRST][side][0]["status"] == 200
        assert rpcs[DUP_COMPLETED][side][0]["status"] == 200
        assert rpcs[DUP_IN_PROGRESS][side][0]["status"] == 409
        assert rpcs[RECLAIM][side][0]["status"] == 200
        storm = samples.data["contention"]["2"][side][0]
        assert storm["executions"] == 1
        assert sum(storm["statuses"].values()) == 2
        assert samples.data["latency"]["first deliveries"][side][0]["non_2xx"] == 0
        assert samples.data["throughput"]["2"][side][0] > 0
        assert samples.data["coldstart"]["fresh process"][side][0]["status"] == 200
        size = samples.data["ledger"]["2x2"][side][0]
        assert size["documents"] == 4
        assert size["total_bytes"] > 0

    table = Report(samples).markdown()
    for section in ("RPCs per delivery", "Contention", "latency", "Cold start", "Targets"):
        assert section in table
