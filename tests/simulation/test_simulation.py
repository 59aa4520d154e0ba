"""The deterministic simulation: seeds hold the rule, and it catches bugs.

A smoke of two seeds runs with every fault class (`scenario.FEATURES`) on and
must show no violation; the long run of the fixed seeds is `make simulate`'s,
which CI runs (.ci/run, the workflow's `simulate` job: `SIMULATE_SEEDS`). The
mutation tests break the ledger on purpose and require the simulator to notice.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from runledger import schedules
from runledger.audit import runner
from runledger.backfill import runs
from runledger.config import Settings
from runledger.delivery import duplicate_wait, pipeline
from runledger.delivery.identify import run_key
from runledger.ledger import machine, overlap
from runledger.ledger.record import FINAL_STATUSES, Status, Versioned
from scheduler_dedup.localrun.simulation import release
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


# Where a mutation test looks for a world that reaches its broken rule: the first seed
# that shows the violation ends the search. Every fault class that enters the world
# redraws the worlds, so a test names the rule, not the seed.
SEARCH_SEEDS = range(16)


def _caught(*kinds: str, seeds: range = SEARCH_SEEDS) -> bool:
    """Whether some seed's violations include every one of `kinds` (a rule's name)."""
    for seed in seeds:
        found = {v.line().split(":")[0] for v in run_seed(seed, ON).violations}
        if set(kinds) <= found:
            return True
    return False


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
SKEW_SEEDS = range(34, 35)


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


# The classes of issue 35 draw last: without them a seed's world is the one it was before,
# and seed 34's reaches a takeover right at the skew margin. Its world in one region:
# `region_outage` runs it in two, which play differently.
ISSUE_35 = frozenset(
    {
        "job_work",
        "request_timeout",
        "pause_api_versions",
        "unreadable_scheduler",
        "ttl_deletion",
        "ops_release",
    }
)
ONE_REGION = frozenset({"region_outage"})
# `deploy_in_flight` adds a job whose deliveries draw from the world's generator too.
NO_DEPLOYS = frozenset({"deploy_in_flight"})


def test_a_takeover_without_the_clock_skew_margin_is_caught(monkeypatch):
    monkeypatch.setattr(machine, "MAX_CLOCK_SKEW", timedelta(0))
    found = _violations(SKEW_SEEDS, ON - ISSUE_35 - ONE_REGION - NO_DEPLOYS)
    assert any("two live holders" in line for line in found)


def test_a_rerun_keyed_as_the_first_run_is_caught(monkeypatch):
    """A rerun of a completed time under the time's own key is a duplicate, never run."""

    def first_run_key(job, schedule_time, project, region, generation):
        return run_key(job, schedule_time, project, region, manual=False)

    monkeypatch.setattr(runs, "generation_key", first_run_key)
    assert _caught("rerun asked, never run")


def test_a_handler_keyed_by_its_own_region_is_caught(monkeypatch):
    """Each region keying the runs it delivers by itself (not DEDUP_KEY_REGION) runs a
    time once per region (`region_outage`: both regions deliver every time)."""
    monkeypatch.setattr(Settings, "keyed_region", lambda self, delivered: delivered)
    assert _caught("ran twice")


def test_a_dead_letter_sent_again_despite_its_note_is_caught(monkeypatch):
    """The ledger's read forgets a run's dead-letter note: the audit publishes it again."""
    read = machine.Ledger.read_versioned

    def forgetful(self, key):
        seen = read(self, key)
        if seen is None:
            return None
        return dataclasses.replace(
            seen, record=dataclasses.replace(seen.record, dead_letter_id=None)
        )

    monkeypatch.setattr(machine.Ledger, "read_versioned", forgetful)
    assert _caught("dead letter after its note")


@pytest.mark.firestore
@pytest.mark.timeout(900)
def test_a_seed_on_the_emulator_keeps_the_rule(firestore_emulator):
    """The same world on the real FirestoreRunStore: the memory store's semantics hold there."""
    from scheduler_dedup.localrun.simulation.emulated import emulated_stores

    result = run_seed(3, ON, emulated_stores(firestore_emulator))
    assert len(result.expected) > 100
    assert [v.line() for v in result.violations] == []


def test_work_items_read_past_the_store_are_caught(monkeypatch):
    """`job_work`: a RunWork that never sees the items stored redoes stages and outputs."""
    from runledger.sdk import work

    monkeypatch.setattr(work.RunWork, "_lookup", lambda self, kind, names: dict.fromkeys(names))
    assert _caught("stage redone", "output produced twice")


def test_pauses_read_through_v1_alone_are_caught(monkeypatch):
    """`pause_api_versions`: a pause log matching only v1's method names misses beta pauses."""
    from runledger.audit import pause_log

    monkeypatch.setattr(pause_log, "PAUSE_METHODS", pause_log.PAUSE_METHODS[:1])
    monkeypatch.setattr(pause_log, "RESUME_METHODS", pause_log.RESUME_METHODS[:1])
    assert _caught("lost", seeds=range(32))  # 26 shows it with `deploy_in_flight` on


def test_a_handler_that_ignores_the_active_window_is_caught(monkeypatch):
    # The handler's window test always passing: the pipeline runs every delivered time.
    monkeypatch.setattr(schedules.JobSchedule, "in_window", lambda self, instant: True)
    assert _caught("outside-window time run")


def test_a_handler_that_ignores_a_suspension_is_caught(monkeypatch):
    # Deliveries never see their job suspended: its runs go on while it is.
    monkeypatch.setattr(machine.Ledger, "suspension", lambda self, run: None)
    assert _caught("run while suspended")


def test_a_release_without_its_fence_is_caught(monkeypatch):
    """`ops release` writes over whatever the run became since the operator read it."""
    fenced = machine.Ledger.release_failed

    def unfenced(self, key, seen, released_by, clear_checkpoints):
        current = self._store.get(key)
        version = seen.version if current is None else current.version
        fenced(self, key, Versioned(seen.record, version), released_by, clear_checkpoints)

    monkeypatch.setattr(machine.Ledger, "release_failed", unfenced)
    assert _caught("refused release changed it")


def test_a_release_of_a_completed_run_is_caught(monkeypatch):
    """`ops release` gives back any run, not only a failed one: a completed time runs again."""
    for module in (machine, release):
        monkeypatch.setattr(module, "refuse_release", lambda key, record, now: None)
    assert _caught("released a run not failed")


def test_an_audit_that_forgets_released_runs_is_caught(monkeypatch):
    """The audit takes a released run as settled: no catch-up redoes it, no finding names it."""
    judge = runner.judge

    def forgets_released(run, records, now, lease):
        if any(record.status is Status.RELEASED for record in records):
            return None
        return judge(run, records, now, lease)

    monkeypatch.setattr(runner, "judge", forgets_released)
    assert _caught("released, then silent")


def test_a_pause_log_blind_to_deletions_is_caught(monkeypatch):
    """`deploy_in_flight`: a pause log that reads no DeleteJob or CreateJob takes a job a
    deploy removed and one added back as there all along: its absence reported, caught up."""
    from runledger.audit import pause_log

    monkeypatch.setattr(pause_log, "DELETE_METHODS", ())
    monkeypatch.setattr(pause_log, "CREATE_METHODS", ())
    assert _caught("unscheduled time reported", "unscheduled time run", seeds=range(9, 17))


def test_an_audit_that_records_a_new_schedule_unseen_is_caught(monkeypatch):
    """`deploy_in_flight`: a new revision auditing with Scheduler's listing unread records
    the new schedule's epoch before Scheduler has it, and catches up a time never sent (the
    world of seed 1892 shows it; seed 36's did before Scheduler's log carried UpdateJobs)."""
    from runledger.ledger import watermarks

    record = watermarks.record_epochs

    def unseen(store, project, region, schedules, now, seen=None):
        return record(store, project, region, schedules, now)

    monkeypatch.setattr(watermarks, "record_epochs", unseen)
    assert _caught("unscheduled time run", seeds=range(1892, 1893))
