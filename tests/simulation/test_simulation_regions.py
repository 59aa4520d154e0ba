"""The simulator's `region_outage` class: two regions, one out, every time once, nothing reported.

Each outage kind is played for an hour in the first region (the key region, so the
second region's deliveries carry the whole schedule under keys it does not name
itself), with every other fault of the world switched off, so any finding or any
time run twice is the regions' doing.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from runledger.ledger.memory_store import MemoryRunStore
from scheduler_dedup.localrun.simulation.checker import check, expected_times
from scheduler_dedup.localrun.simulation.oracle import History
from scheduler_dedup.localrun.simulation.regions import KINDS, SECOND_REGION, RegionOutage
from scheduler_dedup.localrun.simulation.run import run_seed
from scheduler_dedup.localrun.simulation.scenario import FEATURES, REGION, generate
from scheduler_dedup.localrun.simulation.world import World

ON = frozenset(FEATURES)
LOST = ("run_missed", "run_stale", "job_drifted")


def two_region_seeds(count: int) -> list[int]:
    seeds = [seed for seed in range(400) if len(generate(seed, ON).regions) == 2]
    return seeds[:count]


def test_some_seeds_run_in_two_regions_and_none_without_the_class():
    assert len(two_region_seeds(5)) == 5
    assert all(len(generate(seed, ON - {"region_outage"}).regions) == 1 for seed in range(40))
    assert {len(generate(seed, ON).regions) for seed in range(40)} == {1, 2}


def test_a_seed_in_one_region_plays_as_with_the_class_off():
    seed = next(seed for seed in range(40) if len(generate(seed, ON).regions) == 1)
    on, off = run_seed(seed, ON), run_seed(seed, ON - {"region_outage"})
    assert on.history.records == off.history.records
    assert on.history.findings == off.history.findings


@pytest.mark.parametrize("seed", two_region_seeds(4))
def test_two_region_seeds_with_every_fault_keep_each_time_to_one_fate(seed):
    result = run_seed(seed, ON)

    assert [v.line() for v in result.violations] == []
    # Both regions' deliveries claimed runs: the second region is no spectator.
    assert delivering_regions(result.history) == {REGION, SECOND_REGION}


def delivering_regions(history: History) -> set[str]:
    return {
        record.delivered_region
        for written in history.records.values()
        for _, record in written
        if record is not None and record.delivered_region is not None
    }


def quiet(seed: int, outages: tuple[RegionOutage, ...]) -> tuple[History, list]:
    """`seed`'s two-region world with no fault but `outages`: its history and violations."""
    scenario = generate(seed, ON)
    assert len(scenario.regions) == 2
    scenario = replace(
        scenario,
        jobs=[replace(job, retryable=0.0, terminal=0.0) for job in scenario.jobs],
        fault_rate=0.0,
        partition_rate=0.0,
        lost_claims=0.0,
        lost_answers=0.0,
        duplicates=0.0,
        outages=(),
        api_fault_rate=0.0,
        region_outages=outages,
        deploys=None,  # `deploy_in_flight`'s deploys are faults of their own
    )
    history = History()
    World(scenario, MemoryRunStore(), history).run()
    jobs = [(job.id, job.schedule, job.time_zone) for job in scenario.jobs]
    windows = {job.id: job.in_window for job in scenario.jobs if job.start_at or job.end_at}
    expected = expected_times(jobs, scenario.start, scenario.end, scenario.project, REGION, windows)
    return history, check(history, expected)


def lost(history: History, jobs: set[str]) -> set[tuple]:
    return {
        (job, when, outcome)
        for _, job, when, outcome, _ in history.findings
        if outcome in LOST and job in jobs
    }


@pytest.mark.parametrize("kind", KINDS)
def test_the_key_region_out_for_an_hour_loses_no_time_and_adds_no_finding(kind):
    seed = two_region_seeds(1)[0]
    scenario = generate(seed, ON)
    start = scenario.start
    down = RegionOutage(
        REGION, kind, start + timedelta(minutes=20), start + timedelta(hours=1, minutes=20)
    )
    healthy, healthy_violations = quiet(seed, ())

    history, violations = quiet(seed, (down,))

    # No time ran twice or was lost, and no finding names a time that ran.
    assert healthy_violations == []
    assert violations == []
    # Jobs that allow overlap lose no time to the outage: their findings are those of
    # the healthy world. A skip or delay job's time that one region's Scheduler did not
    # send while its previous attempt was outstanding is reported missed, as in one region.
    allow = {job.id for job in scenario.jobs if job.overlap == "allow"}
    assert lost(history, allow) == lost(healthy, allow)
    assert SECOND_REGION in delivering_regions(history)
    if kind in ("scheduler", "5xx", "store"):
        # No delivery the downed region sent during its outage claimed a run: each
        # attempt's claim is its first write, timed by the world's clock.
        claims: dict[tuple[str, str], tuple] = {}
        for key, written in history.records.items():
            for at, record in written:
                if record is not None:
                    claims.setdefault((key, record.attempt_id), (at, record.delivered_region))
        assert [
            c for c in claims.values() if c[1] == REGION and down.start <= c[0] < down.end
        ] == []
