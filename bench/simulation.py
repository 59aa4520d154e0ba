"""How fast the deterministic simulation runs: simulated hours per wall-clock second.

One process plays `seeds` seeds of `scheduler_dedup.localrun.simulation` on the memory
store, with every fault class on, and the wall time is all of it: the world, the real
handler code, the oracle's check. Simulated time is each world's span on the fake clock,
from its window's start to where it stopped (settled, or its cap). FoundationDB's
"Simulation and Testing" page says its simulations usually represent about ten times the
time they take ("a 10-1 factor of real-to-simulated time"); another system on other
hardware, quoted for scale only. `make simulate`'s 1,000 seeds run on two
processes, so they take about half of 1,000 / this run's seeds per second.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scheduler_dedup.localrun.simulation.run import run_seed
from scheduler_dedup.localrun.simulation.scenario import FEATURES

# FoundationDB's published ratio of represented to elapsed time, for scale only.
FOUNDATIONDB_RATIO = 10.0


@dataclass(frozen=True)
class SimulationRate:
    seeds: int
    scheduled_times: int
    simulated_s: float
    wall_s: float

    @property
    def per_second(self) -> float:
        return self.scheduled_times / self.wall_s

    @property
    def hours_per_second(self) -> float:
        """Simulated hours per wall-clock second."""
        return self.simulated_s / 3600 / self.wall_s


def measure(seeds: int) -> SimulationRate:
    started = time.perf_counter()
    times = simulated = 0.0
    for seed in range(seeds):
        result = run_seed(seed, frozenset(FEATURES))
        times += len(result.expected)
        simulated += result.simulated.total_seconds()
    return SimulationRate(seeds, int(times), simulated, time.perf_counter() - started)


def section(
    data: dict[str, dict[str, list[dict[str, Any]]]] | None,
    table: Callable[[list[str], list[list[str]]], str],
) -> str:
    """One row of the last run: seeds, scheduled times, simulated hours, wall time, rates."""
    if not data:
        return ""
    last = data["memory store"]["handler"][-1]
    rate = SimulationRate(**last)
    ratio = rate.simulated_s / rate.wall_s
    row = [
        str(rate.seeds),
        f"{rate.scheduled_times:,}",
        f"{rate.simulated_s / 3600:.1f}",
        f"{rate.wall_s:.1f}",
        f"{rate.per_second:.0f}",
        f"{rate.hours_per_second:.2f}",
        f"{ratio:,.0f}:1",
    ]
    header = [
        "seeds",
        "scheduled times",
        "simulated h",
        "wall s",
        "scheduled times / s",
        "simulated h / wall s",
        "simulated : real",
    ]
    title = (
        "**Simulation** (`make simulate`): seeds of the whole system on the memory store, "
        "one process, every fault class on; simulated : real is the fake clock's span per "
        f"wall-clock span (for scale only: FoundationDB publishes about {FOUNDATIONDB_RATIO:.0f}:1 "
        "for its simulator)"
    )
    return title + "\n\n" + table(header, [row])
