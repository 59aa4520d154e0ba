"""How fast the deterministic simulation runs: simulated scheduled times per second.

One process plays `seeds` seeds of `scheduler_dedup.localrun.simulation` on the memory store, with
every fault class on, and the wall time is all of it: the world, the real
handler code, the oracle's check. `make simulate`'s 1,000 seeds run on two
processes, so they take about half of seeds / this rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scheduler_dedup.localrun.simulation.run import run_seed
from scheduler_dedup.localrun.simulation.scenario import FEATURES


@dataclass(frozen=True)
class SimulationRate:
    seeds: int
    scheduled_times: int
    wall_s: float

    @property
    def per_second(self) -> float:
        return self.scheduled_times / self.wall_s


def measure(seeds: int) -> SimulationRate:
    started = time.perf_counter()
    times = sum(len(run_seed(seed, frozenset(FEATURES)).expected) for seed in range(seeds))
    return SimulationRate(seeds, times, time.perf_counter() - started)


def section(
    data: dict[str, dict[str, list[dict[str, Any]]]] | None,
    table: Callable[[list[str], list[list[str]]], str],
) -> str:
    """One row: seeds, scheduled times, wall time and times per second of the last run."""
    if not data:
        return ""
    last = data["memory store"]["handler"][-1]
    rate = last["scheduled_times"] / last["wall_s"]
    row = [
        str(last["seeds"]),
        f"{last['scheduled_times']:,}",
        f"{last['wall_s']:.1f}",
        f"{rate:.0f}",
    ]
    header = ["seeds", "scheduled times", "wall s", "scheduled times / s"]
    title = (
        "**Simulation** (`make simulate`): seeds of the whole system on the memory store, "
        "one process, every fault class on"
    )
    return title + "\n\n" + table(header, [row])
