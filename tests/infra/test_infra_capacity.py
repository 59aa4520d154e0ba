"""The plan's capacity numbers: whether waiting duplicates can starve other jobs' deliveries."""

from __future__ import annotations

import pytest

from dedup_schedule.config.capacity import capacity, overlapping_runs, run_span_s
from dedup_schedule.config.parser import parse_config
from scheduler_dedup.offline.stack_file import read_project_name, read_stack_values
from tests.stacks import FIXTURE_DIR, REPO_ROOT, REPO_STACKS, fixture_values


def _stack(**overrides: object) -> dict[str, object]:
    """The fixture stack with some of its settings changed."""
    return fixture_values() | {f"scheduler-dedup:{key}": value for key, value in overrides.items()}


@pytest.mark.parametrize("stack", REPO_STACKS)
def test_every_stack_of_the_repo_serves_twice_what_its_jobs_can_have_in_flight(
    stack: str,
) -> None:
    # The plan's own verdict, whatever the stack's jobs: a team's stack may well have
    # runs whose retry window outlasts their interval (see the test below).
    config = parse_config(read_stack_values(REPO_ROOT, stack), read_project_name(REPO_ROOT))
    found = capacity(config)
    assert found.serves == config.max_instances * config.concurrency
    assert found.holds and found.serves >= 2 * found.in_flight
    assert found.summary().endswith(": holds")


def test_a_retry_window_longer_than_the_interval_counts_every_run_it_spans() -> None:
    # */15 with two retries of a 300 s deadline: a run's requests may stay open for
    # (3 x 300 s + the backoffs) + what the request timeout adds past the deadline,
    # longer than 15 minutes, so the next run's holder and retry are in flight too.
    job = {
        "id": "quarter-hourly",
        "schedule": "*/15 * * * *",
        "attemptDeadline": "300s",
        "retry": {"retryCount": 2},
    }
    config = parse_config(_stack(jobs=[job]), read_project_name(FIXTURE_DIR))
    (parsed,) = config.jobs
    span = run_span_s(parsed, config.request_timeout_s)
    assert span > 900
    found = capacity(config)
    assert found.per_job == {"quarter-hourly": 2 * overlapping_runs("*/15 * * * *", span)}
    assert found.per_job["quarter-hourly"] > 2
    assert found.holds == (found.serves >= 2 * found.in_flight)


def test_one_request_per_instance_is_reported_short() -> None:
    config = parse_config(_stack(concurrency=1), read_project_name(FIXTURE_DIR))
    found = capacity(config)
    assert not found.holds
    assert "SHORT: raise concurrency" in found.summary()


def test_runs_that_outlast_the_interval_count_once_each() -> None:
    assert overlapping_runs("*/5 * * * *", 900) == 3
    assert overlapping_runs("*/5 * * * *", 899) == 3
    assert overlapping_runs("*/5 * * * *", 300) == 1
    assert overlapping_runs("0 9 * * 1-5", 3600) == 1
    config = parse_config(_stack(), read_project_name(FIXTURE_DIR))
    job = config.jobs[0]
    assert run_span_s(job, config.request_timeout_s) == (
        job.retry_window_s + config.request_timeout_s - job.attempt_deadline_s
    )
