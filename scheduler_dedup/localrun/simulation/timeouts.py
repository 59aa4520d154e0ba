"""Cloud Run's request timeout cutting a request mid-job (the fault class `request_timeout`).

At the service's request timeout Cloud Run answers the caller 504 while the code goes
on (platform-facts.md, "Cloud Run"): Scheduler counts the attempt failed and retries
it, and the request keeps its claim, its renewals and its body. With request-based
billing the instance's CPU is throttled once no request counts as in flight, so the
cut request works on slower: its sleeps, and so its steps and its lease renewals,
take `throttle` times as long. Its lease may then run out by its own clock (it stops
at its next lease check) or by the store's (a retry takes the run over, fenced).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from scheduler_dedup.localrun.simulation.clock import Task

if TYPE_CHECKING:
    from scheduler_dedup.localrun.simulation.world import World

# How much longer than its floor a request timeout is drawn (Cloud Run's default is
# 300 s), and how much slower a cut request works on (1: CPU always allocated).
LONGER_S = (0, 60, 120, 300)
THROTTLES = (1.0, 2.0, 5.0, 20.0)


@dataclass(frozen=True)
class RequestTimeout:
    after: timedelta
    throttle: float


def draw(rng: random.Random, floor: timedelta) -> RequestTimeout:
    """A timeout as a stack that keeps docs/work.md's rule deploys one: at least `floor`.

    The program refuses a `requestTimeout` below the largest `attemptDeadline` (and
    gives the audit's own job the request timeout as its deadline), and a job's real
    duration must fit in it; `floor` is the larger of those. A delivery is then cut
    only when it works past its own duration (a duplicate's wait, retries of a store
    call), and an audit when the catch-ups and backfills it runs one after another
    take longer than one request.
    """
    after = floor + timedelta(seconds=rng.choice(LONGER_S))
    return RequestTimeout(after, rng.choice(THROTTLES))


def arm(
    world: World,
    task: Task,
    job: str,
    stamped: datetime | None,
    answer: Callable[[int], None],
) -> None:
    """Cut `task` at the request timeout if it has not answered by then."""
    timeout = world.scenario.request_timeout
    if timeout is None:
        return

    def cut() -> None:
        if task.done or task.killed:
            return
        task.slowdown = timeout.throttle
        if stamped is not None:
            world.history.note(
                job,
                stamped,
                world.loop.now,
                f"request timeout: 504 to the caller, {task.name} works on "
                f"({timeout.throttle:g}x slower)",
            )
        answer(504)

    world.loop.after(timeout.after, cut)
