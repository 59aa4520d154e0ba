"""One seed, start to verdict: its scenario, its world on a store, the oracle's check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from runledger.ledger.memory_store import MemoryRunStore
from scheduler_dedup.localrun.simulation import deploys, operator, release
from scheduler_dedup.localrun.simulation.checker import Expected, check, expected_times
from scheduler_dedup.localrun.simulation.oracle import History, Violation
from scheduler_dedup.localrun.simulation.scenario import Scenario, generate
from scheduler_dedup.localrun.simulation.world import World


@dataclass
class SeedResult:
    scenario: Scenario
    history: History
    expected: list[Expected]
    violations: list[Violation]
    faults: dict[str, int]
    simulated: timedelta  # the world's span on the fake clock, start to stop
    api_faults: dict[str, int]  # the Scheduler and log reads that failed, by fault


def run_seed(
    seed: int, features: frozenset[str], store: Callable[[], Any] = MemoryRunStore
) -> SeedResult:
    """Play `seed` with the fault classes `features` on, on a fresh `store()`, and check it."""
    scenario = generate(seed, features)
    release.draw(scenario)  # before the operator's: its sort and settle time cover them
    deploys.schedule(scenario)  # `deploy_in_flight`: likewise
    operator.draw(scenario)
    history = History()
    world = World(scenario, store(), history)
    world.run()
    jobs = [(job.id, job.schedule, job.time_zone) for job in scenario.jobs]
    windows = {job.id: job.in_window for job in scenario.jobs if job.start_at or job.end_at}
    expected = expected_times(
        jobs, scenario.start, scenario.end, scenario.project, scenario.region, windows
    )
    expected += deploys.expected(scenario, history.deploys, scenario.project, scenario.region)
    return SeedResult(
        scenario,
        history,
        expected,
        check(history, expected),
        world.faults.counts,
        world.stopped - scenario.start,
        world.api.counts,
    )
