"""The deterministic simulation: seeds hold the rule, and it catches bugs.

A smoke of two seeds runs with every fault class (`scenario.FEATURES`) on and
must show no violation; the long run of the fixed seeds is `make simulate`'s,
which CI runs (.ci/run, the workflow's `simulate` job: `SIMULATE_SEEDS`). The
mutation tests break the ledger on purpose and require the simulator to notice.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from runledger.delivery import duplicate_wait, pipeline
from runledger.ledger import machine, overlap
from runledger.ledger.record import FINAL_STATUSES, Status
from scheduler_dedup.localrun.simulation.run import run_seed
from scheduler_dedup.localrun.simulation.scenario import FEATURES
from tests.stacks import REPO_ROOT

ON = frozenset(FEATURES)
# The smoke's seeds: about 1.5 s of one core, a world of each size the scenario draws.
SMOKE_SEEDS = (0, 2)
# What CI runs as `make simulate ARGS="--seeds N"` (.ci/run, .github/workflows/policy.yml).
SIMULATE_SEEDS = 24


def _violations(seeds: range, features: frozenset[str] = ON) -> list[str]:
    return [v.line() for seed in seeds for v in run_seed(seed, features).violations]


def test_a_smoke_of_seeds_keeps_every_time_to_one_fate():
    results = [run_seed(seed, ON) for seed in SMOKE_SEEDS]
    assert sum(len(result.expected) for result in results) > 400
    assert [v.line() for result in results for v in result.violations] == []


@pytest.mark.parametrize("path", [".ci/run", ".github/workflows/policy.yml"])
def test_ci_runs_the_fixed_seeds_with_make_simulate(path):
    assert f'make simulate ARGS="--seeds {SIMULATE_SEEDS}"' in (REPO_ROOT / path).read_text()


def test_a_seed_replays_to_the_same_history():
    first, second = run_seed(5, frozenset(FEATURES)), run_seed(5, frozenset(FEATURES))
    assert [v.line() for v in first.violations] == [v.line() for v in second.violations]
    assert first.history.records == second.history.records
    assert first.faults == second.faults


def _patch_takeover(monkeypatch, rule):
    for module in (machine, overlap, pipeline, duplicate_wait):
        monkeypatch.setattr(module, "may_take_over", rule)


# Seeds whose worlds reach the broken rule: a takeover, a duplicate of a final run,
# a holder cut off from the store whose lease runs out while a duplicate polls.
MUTATION_SEEDS = range(4)
SKEW_SEEDS = range(13, 14)


def test_a_takeover_that_ignores_the_lease_is_caught(monkeypatch):
    def ignores_lease(record, now):
        return record.is_expired(now) or record.status not in FINAL_STATUSES

    _patch_takeover(monkeypatch, ignores_lease)
    assert any("two live holders" in line for line in _violations(MUTATION_SEEDS))


def test_a_final_run_claimed_again_is_caught(monkeypatch):
    def claims_final_runs(record, now):
        return (
            record.is_expired(now)
            or record.status is not Status.IN_PROGRESS
            or (record.lease_expires + machine.MAX_CLOCK_SKEW <= now)
        )

    _patch_takeover(monkeypatch, claims_final_runs)
    assert _violations(MUTATION_SEEDS)


def test_a_takeover_without_the_clock_skew_margin_is_caught(monkeypatch):
    monkeypatch.setattr(machine, "MAX_CLOCK_SKEW", timedelta(0))
    # The seed was found in one region; its world in two regions plays differently.
    one_region = ON - {"region_outage"}
    assert any("two live holders" in line for line in _violations(SKEW_SEEDS, one_region))


@pytest.mark.firestore
@pytest.mark.timeout(900)
def test_a_seed_on_the_emulator_keeps_the_rule(firestore_emulator):
    """The same world on the real FirestoreRunStore: the memory store's semantics hold there."""
    from scheduler_dedup.localrun.simulation.emulated import emulated_stores

    result = run_seed(3, ON, emulated_stores(firestore_emulator))
    assert len(result.expected) > 100
    assert [v.line() for v in result.violations] == []
