"""The benchmark code itself runs end to end and reports sane values.

A tiny configuration of the real suite (both served processes, every metric,
one repetition) against the session's emulator; the measurements themselves
stay out of `make test` and run with `make bench`. The modelled round trip is
set well above loopback noise (10 ms) so that a ten-delivery stream can show
the relay really delays every RPC.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from bench import dupwait
from bench.audit_cost import MISSING_EVERY, AuditSize
from bench.audit_steady import SteadySize
from bench.report import Report
from bench.rpcs import DUP_COMPLETED, DUP_IN_PROGRESS, FIRST, RECLAIM
from bench.runner import (
    DUP_STREAM,
    FIRST_STREAM,
    BenchConfig,
    rtt_variant,
    run_bench,
    run_coldstart,
)
from bench.summary import percentile

RTT_MS = 10.0

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
    rtt_ms=RTT_MS,
    rtt_warmup_deliveries=3,
    link_echo_count=10,
    audit_sizes=(AuditSize(5, 5, 2), AuditSize(300, 5, 6)),
    steady_sizes=(SteadySize(20, 5), SteadySize(20, 5, timedelta(hours=6))),
    simulation_seeds=1,
)


def _p50(sample: dict) -> float:
    return percentile(sample["latencies_s"], 0.5)


@pytest.mark.firestore
@pytest.mark.timeout(600)  # one of the suite's longest: it starts first (tests/conftest.py)
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

    waits = samples.data["dupwait"]
    completed, ran_on = waits[dupwait.COMPLETES]["handler"][0], waits[dupwait.RUNS_ON]["handler"][0]
    assert (completed["status"], ran_on["status"]) == (200, 409)
    assert dupwait.HOLDER_S <= completed["seconds"] < ran_on["seconds"]
    assert ran_on["reads"] == 1 + 4  # the claim's read; polls at 0.5, 1.5, 3.5 and 4 s

    latency = samples.data["latency"]
    first_rtt = rtt_variant(FIRST_STREAM, RTT_MS)
    for side in ("handler", "baseline"):
        for name in (FIRST_STREAM, DUP_STREAM):
            assert latency[rtt_variant(name, RTT_MS)][side][0]["non_2xx"] == 0
    # Every RPC through the delay link waits at least one RTT, so a first delivery takes at
    # least its RPC count times the RTT. A lower bound that load can only push further up;
    # a difference of two medians would not survive a busy machine.
    assert _p50(latency[first_rtt]["handler"][0]) >= 2 * RTT_MS / 1000
    assert _p50(latency[first_rtt]["baseline"][0]) >= 6 * RTT_MS / 1000
    assert samples.data["link"]["echo"]["p50"][0] >= RTT_MS / 1000

    # One audit: one billed read per job's epoch and per settled schedule time, in one
    # batch each; the runs left without a record are its findings. 300 jobs over 6 h is
    # refused unread.
    (small,) = samples.data["audit"][AuditSize(5, 5, 2).label]["handler"]
    assert small["expected_runs"] == 120
    assert 100 <= small["checked"] < 120  # the last ~8 minutes are still in their retry window
    assert small["reads"] == 5 + small["checked"]
    assert small["rpcs"] == 2
    assert small["findings"] == small["checked"] // MISSING_EVERY >= 2
    (large,) = samples.data["audit"][AuditSize(300, 5, 6).label]["handler"]
    assert large["refused"] and "20000 reads" in large["refused"]
    assert (large["reads"], large["rpcs"], large["expected_runs"]) == (0, 0, 21_600)

    # The handler's audit from its watermarks: each run settled since the last audit read
    # once, plus at most one shard per job; right after, only the shards and the open findings.
    steady, again = samples.data["audit_steady"][SteadySize(20, 5).label]["handler"]
    assert steady["scheduled"] == steady["checked"] == 20 * 6
    assert steady["checked"] < steady["reads"] <= steady["checked"] + 20
    assert 0 < steady["writes"] <= 20
    assert steady["findings"] == steady["checked"] // MISSING_EVERY
    assert (again["findings"], again["writes"], again["checked"]) == (0, 0, steady["findings"])
    assert again["reads"] <= 20 + steady["findings"]
    (outage,) = samples.data["audit_steady"][SteadySize(20, 5, timedelta(hours=6)).label]["handler"]
    assert outage["checked"] == outage["scheduled"] >= 20 * 70 and outage["deferred"] == 0

    table = Report(samples).markdown()
    for section in (
        "RPCs per delivery",
        "Duplicate wait",
        "Contention",
        "latency",
        "Cold start",
        "Audit cost",
        "Audit from watermarks",
        "Targets",
        "simulated h / wall s",
    ):
        assert section in table
    assert f"{FIRST_STREAM}, RTT {RTT_MS:g} ms, p50" in table


@pytest.mark.firestore
def test_the_cold_start_alone_reports_its_rows_and_target(firestore_emulator):
    """`make bench ARGS=--coldstart`: the fresh processes of both sides, nothing served."""
    config = replace(TINY, warmup_deliveries=2)
    samples = run_coldstart(config, emulator=firestore_emulator, progress=lambda _: None)
    assert set(samples.data) == {"coldstart"}
    for side in ("handler", "baseline"):
        (probe,) = samples.data["coldstart"]["fresh process"][side]
        assert probe["status"] == 200
        assert probe["cpu_s"] > 0.05  # no fresh interpreter loads flask in less CPU time
    report = Report(samples)
    table = report.markdown()
    assert "Cold start" in table and "RPCs per delivery" not in table
    assert "| import + first answer, process CPU time |" in table
    assert [target.name for target in report.targets] == ["cold start no slower than baseline"]
