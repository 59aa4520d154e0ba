"""`ops_release`: the operator gives failed runs back with `python -m runledger.ops release`.

At a few moments of a seed the operator lists the runs (`ops failed`, now and then
`ops runs`, so a run that is not failed too), picks one, and confirms its release
seconds to minutes later, sometimes from two terminals at once, on a laptop clock
`operator_skew` off. The check before asking is the CLI's (`refuse_release`), the
write its own (`ledger_ops.release_run`, fenced by the version read), through the
world's store. What each confirmed release did goes to the history
(`release_history.Releases`), which holds it to the rules.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import TYPE_CHECKING

from runledger.delivery.identify import run_key
from runledger.exceptions import StoreUnavailable
from runledger.ledger.machine import ReleaseRefused, refuse_release
from runledger.ledger.record import Status, Versioned
from runledger.ops.ledger_ops import OpsError, release_run
from scheduler_dedup.localrun.simulation.release_history import Release
from scheduler_dedup.localrun.simulation.scenario import Action, Scenario, moment

if TYPE_CHECKING:
    from scheduler_dedup.localrun.simulation.world import World

NOTE = "runledger.ops by operator@sim"
# The share of looks that list every run (`ops runs`), not only the failed ones.
ANY_STATUS = 0.25
# The share of releases confirmed from two terminals at once.
TWICE = 0.3


def draw(scenario: Scenario) -> None:
    """Add the operator's releases to `scenario` (from a generator of their own)."""
    if "ops_release" not in scenario.features:
        return
    draws = random.Random(f"{scenario.seed}-ops-release")
    for _ in range(draws.randint(1, 4)):
        at = moment(draws, scenario.start, scenario.end) + timedelta(milliseconds=500)
        wait = timedelta(seconds=draws.randint(0, 300))
        every = draws.random() < ANY_STATUS
        twice = draws.random() < TWICE
        pick = random.Random(draws.random())
        scenario.actions.append((at, _look(pick, every, wait, twice)))
        listing = "ops runs" if every else "ops failed"
        scenario.notes.append(f"{at:%H:%M:%S} {listing}, release after {wait}")


def _look(pick: random.Random, every: bool, wait: timedelta, twice: bool) -> Action:
    def act(world: World) -> None:
        scenario = world.scenario
        latest = {
            key: r
            for key, written in world.history.records.items()
            for _, r in written[-1:]
            if r is not None and key == run_key(r.job, r.schedule_time, r.project, r.region, False)
        }
        keys = sorted(k for k, r in latest.items() if every or r.status is Status.FAILED)
        if not keys:
            return
        key = pick.choice(keys)
        found = world.store.get(key)  # `ops release KEY` finds the run
        laptop = world.loop.now + scenario.operator_skew
        if found is None:
            return
        try:
            refuse_release(key, found.record, laptop)  # the plan's check, before asking
        except ReleaseRefused as exc:
            world.history.event(world.loop.now, f"ops release refused: {exc}")
            return
        for _ in range(2 if twice else 1):
            world.loop.after(wait, lambda: _confirm(world, key, found))

    return act


def _confirm(world: World, key: str, seen: Versioned) -> None:
    """The operator answers yes: the release's one write, fenced by the version read."""
    before = world.inner.get(key)
    count = len(world.history.records[key])
    try:
        release_run(world.store, key, seen, world.loop.now + world.scenario.operator_skew, NOTE)
        answer = "released"
    except OpsError as exc:
        answer = f"refused: {exc}"
    except StoreUnavailable as exc:
        answer = f"error: {exc}"
    written = tuple(r for _, r in world.history.records[key][count:] if r is not None)
    world.history.releases.confirm(
        Release(
            world.loop.now,
            key,
            seen.record,
            None if before is None else before.record,
            written,
            answer,
        )
    )
    text = f"ops release {key[:12]}: {answer}"
    world.history.note(seen.record.job, seen.record.schedule_time, world.loop.now, text)
