"""The simulated Scheduler retries like the stack's RetryConfig says, and misbehaves on plan.

`drive_run` is exercised with a scripted in-process transport and a fake
clock, so every path (timeout, error, lost acknowledgement, burst,
exhaustion) is checked without HTTP or real waiting.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from runledger.facts import RetryPolicy
from scheduler_dedup.localrun.demo_stack import sim_jobs, speedups
from scheduler_dedup.localrun.simulator import (
    Answer,
    Fault,
    Request,
    RunPlan,
    RunResult,
    Seen,
    SimJob,
    delay_before_retry,
    drive_run,
    retry_delays,
)
from tests.localrun.demo_project import demo_stack

WHEN = datetime(2026, 11, 28, 1, 30, tzinfo=UTC)


def _job(retries: int, max_retry_duration_s: float = 0.0, min_backoff_s: float = 0.1) -> SimJob:
    """A job in demo seconds whose backoff starts at `min_backoff_s` and doubles."""
    retry = RetryPolicy(retries, max_retry_duration_s, min_backoff_s)
    return SimJob(
        id="hourly-sync",
        schedule="5 * * * *",
        time_zone="UTC",
        attempt_deadline_s=1.0,
        retry=retry,
        headers=(),
        body=b"",
    )


class ScriptedTransport:
    """Answers each attempt from a script; records how many copies each attempt sent."""

    def __init__(self, clock: FakeClock, answers: Sequence[Answer]) -> None:
        self.clock = clock
        self.answers = list(answers)
        self.copies: list[int] = []

    def send_all(self, requests: Sequence[Request], timeout_s: float) -> list[Answer]:
        self.copies.append(len(requests))
        answer = self.answers.pop(0)
        self.clock.now += timeout_s if answer.status is None else answer.latency_s
        return [answer] + [Answer(409, "duplicate_in_progress", 0.01)] * (len(requests) - 1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _drive(
    plan: RunPlan, job: SimJob, answers: Sequence[Answer]
) -> tuple[RunResult, ScriptedTransport, FakeClock]:
    clock = FakeClock()
    transport = ScriptedTransport(clock, answers)
    result = drive_run(plan, job, transport, random.Random(1), clock, clock.sleep)
    return result, transport, clock


def _plan(fault: Fault | None, burst: int = 1) -> RunPlan:
    return RunPlan("hourly-sync", WHEN, False, fault, (), burst)


OK = Answer(200, "completed", 0.05)
DONE = Answer(200, "duplicate_completed", 0.01)
BUSY = Answer(409, "duplicate_in_progress", 0.01)
FAILED = Answer(500, "failed_retryable", 0.05)
TIMEOUT = Answer(None, None, 1.0)


def test_backoff_matches_the_stack_config_scaled_by_the_job_speedup() -> None:
    config = demo_stack()
    speedup = speedups(config)
    jobs = {job.id: job for job in sim_jobs(config, speedup)}
    for job in config.jobs:
        factor = speedup[job.id]
        expected = [job.retry.backoff_s(i) / factor for i in range(job.retry.retry_count)]
        assert list(retry_delays(jobs[job.id].retry)) == pytest.approx(expected)
        assert jobs[job.id].retry.max_retry_duration_s == pytest.approx(
            job.retry.max_retry_duration_s / factor
        )
        assert jobs[job.id].attempt_deadline_s == pytest.approx(job.attempt_deadline_s / factor)
    # The slowest job's deadline is compressed to a couple of seconds, none below one.
    assert max(j.attempt_deadline_s for j in jobs.values()) == pytest.approx(2.5)
    assert min(j.attempt_deadline_s for j in jobs.values()) >= 1.0


def test_retry_limits_by_count_and_by_duration() -> None:
    policy = RetryPolicy(retry_count=3, max_retry_duration_s=1.0, min_backoff_s=0.1)
    assert delay_before_retry(policy, 0, 0.0) == 0.1
    assert delay_before_retry(policy, 2, 0.5) == 0.4
    assert delay_before_retry(policy, 3, 0.5) is None  # count used up
    assert delay_before_retry(policy, 1, 1.0) is None  # duration used up
    assert delay_before_retry(RetryPolicy(), 0, 0.0) is None


def test_a_2xx_ends_the_run_at_once() -> None:
    result, _, clock = _drive(_plan(None), _job(1), [OK])
    assert result.acknowledged and not result.exhausted
    assert [d.seen for d in result.deliveries] == [Seen.ANSWERED]
    assert clock.sleeps == []


def test_timeout_is_retried_with_backoff_and_the_retry_finds_the_work_running() -> None:
    result, _, clock = _drive(_plan(Fault.TIMEOUT), _job(3), [TIMEOUT, BUSY, DONE])
    assert result.acknowledged
    assert [d.seen for d in result.deliveries] == [Seen.TIMEOUT, Seen.ANSWERED, Seen.ANSWERED]
    assert [d.after for d in result.deliveries] == [None, "timeout", "status 409"]
    assert clock.sleeps == [0.1, 0.2]
    assert result.retries == 2


def test_retries_stop_when_the_policy_is_exhausted() -> None:
    result, _, clock = _drive(_plan(Fault.EXHAUSTED), _job(2), [FAILED] * 3)
    assert result.exhausted and not result.acknowledged
    assert len(result.deliveries) == 3
    assert clock.sleeps == [0.1, 0.2]


def test_max_retry_duration_cuts_retries_short() -> None:
    result, _, _ = _drive(_plan(Fault.EXHAUSTED), _job(5, 1.1, min_backoff_s=0.5), [FAILED] * 6)
    assert result.exhausted
    assert len(result.deliveries) == 3  # 3 answers of 0.05 s, waits of 0.5 s and 1 s: 1.65 s


def test_a_lost_acknowledgement_is_retried_although_the_handler_answered_200() -> None:
    result, _, _ = _drive(_plan(Fault.LOST_ACK), _job(1), [OK, DONE])
    assert result.acknowledged
    assert [(d.seen, d.status) for d in result.deliveries] == [
        (Seen.LOST_ACK, 200),
        (Seen.ANSWERED, 200),
    ]
    assert result.deliveries[1].after == "lost_ack"


def test_a_lost_acknowledgement_without_retries_leaves_the_run_unacknowledged() -> None:
    result, _, _ = _drive(_plan(Fault.LOST_ACK), _job(0), [OK])
    assert result.exhausted and not result.acknowledged


def test_a_burst_sends_concurrent_copies_of_the_first_attempt_only() -> None:
    result, transport, _ = _drive(_plan(Fault.BURST, burst=4), _job(1), [BUSY, DONE])
    assert transport.copies == [4, 1]
    assert [d.seen for d in result.deliveries].count(Seen.DUPLICATE) == 3
    assert result.acknowledged


def test_a_dropped_run_is_never_sent_and_not_counted_as_exhausted() -> None:
    result, transport, _ = _drive(_plan(Fault.DROPPED), _job(3), [])
    assert transport.copies == []
    assert result.deliveries == []
    assert not result.acknowledged and not result.exhausted
