"""Job bodies that checkpoint and emit once-only outputs (`ctx.stage`, `ctx.output`): the
fault class `job_work`, with every store fault on (the rules: `work_history`).

A staged body splits its work into stages, each run through `ctx.stage` (a later
attempt skips what an earlier one finished), then may fail as any body does, then
takes effect through `ctx.output`: the effect is `produce`, which a later attempt
never calls again once the output landed.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import TYPE_CHECKING

from runledger.ledger.workitem import WorkKind
from runledger.sdk.context import RunContext
from scheduler_dedup.localrun.simulation.oracle import Execution
from scheduler_dedup.localrun.simulation.work_history import OUTPUT, stage_name

if TYPE_CHECKING:
    from scheduler_dedup.localrun.simulation.scenario import SimJob
    from scheduler_dedup.localrun.simulation.world import World

# The share of a seed's jobs whose bodies are staged, and how many stages they have.
STAGED_SHARE = 0.6
STAGES = (1, 3)


def draw(rng: random.Random, jobs: list[SimJob]) -> dict[str, int]:
    """Which jobs' bodies are staged, each with its number of stages."""
    return {job.id: rng.randint(*STAGES) for job in jobs if rng.random() < STAGED_SHARE}


def staged_work(
    world: World,
    job: SimJob,
    context: RunContext,
    execution: Execution,
    work: timedelta,
    stages: int,
) -> None:
    """`work` in `stages` checkpointed stages, a failure at the job's rates, then the output."""
    work_history = world.history.work
    for index in range(stages):
        name = stage_name(index)

        def stage(name: str = name) -> str:
            work_history.starts(context, WorkKind.CHECKPOINT, name, world.loop.now)
            world.steps(context, execution, work / stages)
            return f"{context.attempt_id}/{name}"

        value = context.stage(name, stage)
        work_history.answered(context, name, value, world.loop.now)
    world.maybe_fail(job, execution)

    def produce() -> str:
        work_history.starts(context, WorkKind.OUTPUT, OUTPUT, world.loop.now)
        execution.effect_at = world.loop.now
        return context.attempt_id

    context.output(OUTPUT, produce)
    execution.outcome = "effect" if execution.effect_at is not None else "output found"
