"""What the operator (and the stack's deploys) do in a seed's world, drawn from its seed.

Each action changes the world as the real one would and tells the history what
the operator meant: a pause means its times are deliberately not run, an
unpause that they are due again, whatever Cloud Scheduler then does.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from runledger.backfill.plan import MODE_FAILED, MODE_MISSING, MODES
from scheduler_dedup.localrun.simulation.instants import listed
from scheduler_dedup.localrun.simulation.scenario import Action, Scenario, moment
from scheduler_dedup.localrun.simulation.world import World

# The console edit a drift makes: a schedule the stack never deployed.
DRIFTED = "*/7 * * * *"


def draw(scenario: Scenario) -> None:
    """Add the operator's actions to `scenario`, in time order, each noted for the trace."""
    rng, start, end = scenario.rng, scenario.start, scenario.end
    features = scenario.features
    user = [job.id for job in scenario.jobs]
    allowed = [job.id for job in scenario.jobs if job.overlap == "allow"]

    def add(when: datetime, note: str, action: Action) -> None:
        # Half a second past the draw: never at a scheduled time itself, so which came
        # first is plain in the trace.
        when += timedelta(milliseconds=500)
        scenario.actions.append((when, action))
        scenario.notes.append(f"{when:%H:%M:%S} {note}")

    if "pause_evidence" in features and rng.random() < 0.6:
        job = rng.choice(user)
        at = moment(rng, start, end - timedelta(minutes=30))
        short = "pause_evidence" in features and rng.random() < 0.5
        length = timedelta(minutes=rng.randint(2, 8) if short else rng.randint(25, 80))
        add(at, f"console pause {job} for {length}", _console_pause(job, True))
        add(at + length, f"console resume {job}", _console_pause(job, False))
    if rng.random() < 0.4:
        job = rng.choice(user)
        begin = start if "pause_evidence" in features else after_repeated_hour(scenario)
        at = moment(rng, begin, end - timedelta(minutes=40))
        add(at, f"stack pauses {job} (deploy)", _stack_pause(job, True))
        if "stack_unpause" in features:
            back = at + timedelta(minutes=rng.randint(15, 60))
            add(back, f"stack unpauses {job} (deploy)", _stack_pause(job, False))
    if rng.random() < 0.35:
        job = rng.choice([job for job in user if job != "dst"])
        at = moment(rng, start, end - timedelta(minutes=30))
        back = at + timedelta(minutes=rng.randint(5, 40))
        original = next(j.schedule for j in scenario.jobs if j.id == job)
        add(at, f"console edits {job} to {DRIFTED!r}", _edit(job, DRIFTED, True))
        add(back, f"console edits {job} back", _edit(job, original, False))
    for _ in range(rng.randint(0, 3)):
        job = rng.choice(user)
        stamped = rng.random() < 0.5
        add(
            moment(rng, start, end),
            f"force run {job} (ScheduleTime {stamped})",
            _force(job, stamped),
        )
    suspending = [job.id for job in scenario.jobs if job.suspend_after is not None]
    if suspending:
        # Its own generator: every other action stays as without suspensions.
        draws = random.Random(f"{scenario.seed}-suspension-actions")
        job = suspending[0]
        if draws.random() < 0.5:
            at = moment(draws, start, end - timedelta(minutes=30))
            back = at + timedelta(minutes=draws.randint(5, 40))
            add(at, f"ops suspend {job}", _suspend(job, True))
            add(back, f"ops resume {job}", _suspend(job, False))
        for _ in range(draws.randint(1, 2)):  # resume an automatic suspension, if any
            add(moment(draws, start, end), f"ops resume {job} (if suspended)", _suspend(job, False))
    if "delete_audit_docs" in features and rng.random() < 0.4:
        add(moment(rng, start, end), "operator deletes runledger_audit", _delete_audit)
    for _ in range(rng.randint(0, 2)):
        job = rng.choice(user if "backfill_overlap" in features else allowed)
        at = moment(rng, start + timedelta(minutes=70), end + timedelta(minutes=20))
        at = at.replace(second=0)
        first = at - timedelta(minutes=rng.randint(30, 70))
        last = at - timedelta(minutes=rng.randint(1, 20))
        draw = rng.random()
        mode = MODE_FAILED if draw < 0.5 else MODE_MISSING
        newest_first = False
        if "backfill_modes" in features:
            mode = MODES[int(draw * len(MODES))]
            newest_first = rng.random() < 0.5
        order = " newest first" if newest_first else ""
        add(
            at,
            f"backfill {job} [{first:%H:%M}, {last:%H:%M}) --only {mode}{order}",
            _backfill(job, first, last, mode, newest_first),
        )
    scenario.actions.sort(key=lambda item: item[0])
    scenario.notes.sort()
    # A console pause turns its job `drifted`, and the audit judges none of its runs until
    # the resume: times due before the pause are judged after it, so the world settles
    # only after the operator's last action too (docs/reliability.md, "Settled").
    if scenario.actions:
        scenario.settle = max(scenario.settle, scenario.actions[-1][0])


def after_repeated_hour(scenario: Scenario) -> datetime:
    """The start, or the end of the hour the clocks repeat in the window (its second pass)."""
    zones = {job.time_zone for job in scenario.jobs}
    repeated = [
        instants[-1]
        for zone in zones
        for instants in listed("* * * * *", zone, scenario.start, scenario.end)
        if len(instants) > 1
    ]
    return max(repeated, default=scenario.start)


def _console_pause(job: str, paused: bool) -> Action:
    def act(world: World) -> None:
        world.scheduler.set_paused(job, paused, world.loop.now)
        world.history.intent(job, world.loop.now, paused)

    return act


def _stack_pause(job: str, paused: bool) -> Action:
    def act(world: World) -> None:
        stack = set(world.paused_in_stack)
        world.redeploy(stack | {job} if paused else stack - {job})
        # The program always sends `paused`, so the provider calls PauseJob or
        # ResumeJob whenever the value changes (infra: ScheduledJobs).
        world.scheduler.set_paused(job, paused, world.loop.now)
        world.history.intent(job, world.loop.now, paused)

    return act


def _edit(job: str, schedule: str, drifted: bool) -> Action:
    def act(world: World) -> None:
        world.scheduler.edit(job, schedule, world.settle_cap)
        world.history.drift(job, world.loop.now, drifted)

    return act


def _force(job: str, stamped: bool) -> Action:
    return lambda world: world.scheduler.force(job, stamped)


def _suspend(job: str, suspended: bool) -> Action:
    return lambda world: world.suspend(job, suspended)


def _delete_audit(world: World) -> None:
    world.inner.delete_audit_documents()
    world.history.event(world.loop.now, "runledger_audit deleted (epochs, watermarks, slots)")


def _backfill(job: str, first: datetime, last: datetime, mode: str, newest_first: bool) -> Action:
    return lambda world: world.backfill(job, first, last, mode, newest_first)
