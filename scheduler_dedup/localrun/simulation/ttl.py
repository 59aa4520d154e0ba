"""TTL deletion of run records at `expire_at`, with a retention short enough to matter
(the fault class `ttl_deletion`).

The retention is the shortest the program accepts: a look-back that judges every
run once (the audit's interval, the longest retry window, the lease, the clock
skew and an hour the clocks repeat in a job's zone), plus the lease, plus a margin
of 2 to 2.5 hours; the look-back and each catch-up job's `catchUpMaxAge` are
what the program then derives. Firestore
deletes a record some time after its `expire_at` (typically within a day): here
after a delay drawn per seed, every record past it at once, with its checkpoints
and outputs, while jobs still run and Scheduler still retries.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from runledger.audit.expected import repeated_s
from runledger.ledger.machine import MAX_CLOCK_SKEW

if TYPE_CHECKING:
    from scheduler_dedup.localrun.simulation.scenario import SimJob
    from scheduler_dedup.localrun.simulation.world import World

# The margin covers the longest the world keeps the audit from a job (a store outage of
# 40 min, the console's edit and pause of one job back to back, up to 2 h). Shorter
# margins (50 min) are out: an `ops release` of a run already past a short look-back is
# answered by no audit (seed 982 under those draws); docs/reliability.md says so.
MARGINS_S = (7200, 9000)
DELAYS_S = (0, 60, 900)
SWEEP = timedelta(minutes=1)


@dataclass(frozen=True)
class Retention:
    retention: timedelta
    lookback_s: int
    catch_up_max_age_s: int
    delay: timedelta  # how long after `expire_at` a record is deleted


def draw(
    rng: random.Random, jobs: list[SimJob], lease: timedelta, audit_interval: timedelta
) -> Retention:
    """The shortest retention the program accepts for `jobs`, plus a drawn margin."""
    settle = math.ceil(max(job.retry.retry_window_s(job.deadline.total_seconds()) for job in jobs))
    # The program's rule (infra audit_parser): a repeated hour of a job's zone counts too.
    repeat = max(repeated_s(job.time_zone) for job in jobs)
    needed = audit_interval.total_seconds() + settle + lease.total_seconds() + repeat
    lookback = int(needed + MAX_CLOCK_SKEW.total_seconds()) + rng.choice(MARGINS_S)
    retention = timedelta(seconds=lookback) + lease
    catch_up = min(3600, lookback - 1)
    return Retention(retention, lookback, catch_up, timedelta(seconds=rng.choice(DELAYS_S)))


def sweep(world: World) -> None:
    """Delete what TTL would have by now, note it, and come back a minute later."""
    retention = world.scenario.ttl
    if retention is None:
        return
    for key in world.inner.delete_expired(world.loop.now - retention.delay):
        world.history.ttl_deleted(key, world.loop.now)
    world.loop.after(SWEEP, lambda: sweep(world))
