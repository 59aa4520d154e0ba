"""The seeded plan: reproducible, every kind of misbehaviour present, runs mapped onto real time."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from scheduler_dedup.localrun.demo_stack import sim_jobs, speedups
from scheduler_dedup.localrun.simulator import (
    AUDIT_MARGIN,
    AUDITED_FAULTS,
    FORCED_RUN_MIN_LEAD,
    SCHEDULED_FAULTS,
    Fault,
    PlanSettings,
    SimJob,
    fire_times,
    plan_runs,
    replayed_since,
)
from tests.localrun.demo_project import demo_stack

NOW = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def jobs() -> list[SimJob]:
    config = demo_stack()
    return sim_jobs(config, speedups(config))


def test_same_seed_same_plan_other_seed_other_plan(jobs: list[SimJob]) -> None:
    def plan(seed: int) -> list:
        return plan_runs(jobs, NOW, PlanSettings(6), random.Random(seed))

    assert plan(5) == plan(5)
    assert plan(5) != plan(6)


@pytest.mark.parametrize("seed", range(20))
def test_every_fault_appears_even_in_a_short_window(jobs: list[SimJob], seed: int) -> None:
    plans = plan_runs(jobs, NOW, PlanSettings(3), random.Random(seed))
    faults = {plan.fault for plan in plans}
    assert set(SCHEDULED_FAULTS) | {Fault.FORCED} <= faults


@pytest.mark.parametrize("seed", range(20))
def test_one_dropped_and_one_exhausted_run_lie_inside_the_audits_window(
    jobs: list[SimJob], seed: int
) -> None:
    plans = plan_runs(jobs, NOW, PlanSettings(8), random.Random(seed))
    audited_from = replayed_since(jobs, NOW, 8) + AUDIT_MARGIN
    audited = [plan for plan in plans if plan.fault in AUDITED_FAULTS]
    assert sorted(plan.fault for plan in audited) == sorted(AUDITED_FAULTS)
    assert all(audited_from < plan.schedule_time <= NOW for plan in audited)


def test_every_fire_time_after_replayed_since_is_replayed(jobs: list[SimJob]) -> None:
    # The audit's window may start at replayed_since: no job has an undelivered time in it.
    since = replayed_since(jobs, NOW, 4)
    delivered = {
        (p.job, p.schedule_time) for p in plan_runs(jobs, NOW, PlanSettings(4), random.Random(0))
    }
    due = {
        (job.id, when)
        for job in jobs
        for when in fire_times(job.schedule, job.time_zone, NOW, 400)
        if when > since
    }
    assert len(due) >= 4
    assert due <= delivered


@pytest.mark.parametrize("seed", range(20))
def test_retry_dependent_faults_only_go_to_jobs_with_retries(jobs: list[SimJob], seed: int) -> None:
    by_id = {job.id: job for job in jobs}
    for plan in plan_runs(jobs, NOW, PlanSettings(8), random.Random(seed)):
        if plan.fault in (Fault.TIMEOUT, Fault.FAILURE, Fault.EXHAUSTED, Fault.LOST_ACK):
            assert by_id[plan.job].retry.retry_count > 0, plan


def test_scheduled_runs_lie_in_the_past_and_forced_runs_carry_the_next_time(
    jobs: list[SimJob],
) -> None:
    plans = plan_runs(jobs, NOW, PlanSettings(4, forced_runs=3), random.Random(1))
    scheduled = [p for p in plans if not p.manual]
    forced = [p for p in plans if p.manual]
    assert len(scheduled) == 4 * len(jobs)
    assert all(p.schedule_time <= NOW for p in scheduled)
    assert forced and all(p.fault is Fault.FORCED for p in forced)
    for plan in forced:
        # Ahead of the handler's clock by more than its 10 s manual-run tolerance.
        assert plan.schedule_time >= NOW + FORCED_RUN_MIN_LEAD
        latest = max(p.schedule_time for p in scheduled if p.job == plan.job)
        assert plan.schedule_time - latest <= timedelta(days=7)  # the very next run of that job


def test_work_scripts_make_each_fault_happen(jobs: list[SimJob]) -> None:
    by_id = {job.id: job for job in jobs}
    plans = plan_runs(jobs, NOW, PlanSettings(8), random.Random(2))
    for plan in plans:
        job = by_id[plan.job]
        if plan.fault is Fault.TIMEOUT:
            first_retry = job.attempt_deadline_s + job.retry.backoff_s(0)
            assert plan.script[0].seconds > first_retry
            assert not plan.script[0].fails
        elif plan.fault is Fault.FAILURE:
            assert plan.script[0].fails and not plan.script[-1].fails
            assert len(plan.script) - 1 <= job.retry.retry_count
        elif plan.fault is Fault.EXHAUSTED:
            assert all(step.fails for step in plan.script)
        else:
            assert [step.fails for step in plan.script] == [False]
            assert plan.script[0].seconds < job.attempt_deadline_s
        if plan.fault is Fault.BURST:
            assert plan.burst_size >= 3
