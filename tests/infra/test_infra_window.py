"""A job's active window in the stack config: validated, written into DEDUP_SCHEDULES, warned of.

The program runs under mocks on a copy of the project; the entry it writes is
read back with the handler's own parser; `make plan` warns of a window that has
closed and refuses one that cannot hold a time, in one line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from runledger.config import Settings
from runledger.schedules import audit_settings
from scheduler_dedup.offline.mockrun import ProgramFailed, run_program
from tests.clitools import run_module

NS = "scheduler-dedup:"
FUNCTION = "gcp:cloudfunctionsv2/function:Function"


@pytest.fixture
def stack(make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]):
    """The multi-job stack with the first job's window keys set as given."""

    def make(**window: Any) -> Path:
        jobs = multi_job_config[f"{NS}jobs"]
        jobs[0].update(window)
        return make_stack({**multi_job_config, f"{NS}jobs": jobs})

    return make


def plan(path: Path):
    return run_module(
        "scheduler_dedup.offline.plan", "--dir", str(path), "--stack", "test", timeout_s=120
    )


def test_the_window_reaches_the_handler_as_given(stack) -> None:
    resources = run_program(
        stack(startAt="2030-01-01T00:00:00+01:00", endAt="2031-01-01T00:00:00Z"), "test"
    )

    (function,) = [r for r in resources if r.type == FUNCTION]
    env = function.inputs["serviceConfig"]["environmentVariables"]
    entries = {entry["id"]: entry for entry in json.loads(env["DEDUP_SCHEDULES"])}
    assert (entries["nightly-report"]["startAt"], entries["nightly-report"]["endAt"]) == (
        "2030-01-01T00:00:00+01:00",
        "2031-01-01T00:00:00+00:00",
    )
    assert "startAt" not in entries["hourly-sync"]  # no window: the entry stays as it was
    (job, *_) = audit_settings(env, Settings.from_env(env)).schedules
    assert job.start_at == datetime(2029, 12, 31, 23, tzinfo=UTC)
    assert job.in_window(datetime(2030, 6, 1, tzinfo=UTC))
    assert not job.in_window(datetime(2031, 1, 1, 0, 0, 1, tzinfo=UTC))


def test_make_plan_warns_when_the_window_has_closed(stack) -> None:
    result = plan(stack(endAt="2020-01-01T00:00:00Z"))

    assert result.returncode == 0, result.stderr
    assert (
        "warning: jobs[0].endAt: 2020-01-01T00:00:00+00:00 has passed; job 'nightly-report' "
        "still fires and every delivery is answered outside_window"
    ) in result.stderr
    assert result.stderr.count("endAt") == 1


def test_make_plan_refuses_a_window_that_ends_before_it_starts(stack) -> None:
    result = plan(stack(startAt="2030-01-02T00:00:00Z", endAt="2030-01-02T01:00:00+01:00"))

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        "error: scheduler-dedup:jobs[0].endAt: endAt 2030-01-02T01:00:00+01:00 is not after "
        "startAt 2030-01-02T00:00:00+00:00: the job would never run"
    )


@pytest.mark.parametrize(
    ("window", "message"),
    [
        ({"startAt": "2030-01-01"}, r"jobs\[0\]\.startAt: '2030-01-01' is not an RFC 3339 time"),
        ({"endAt": 5}, r"jobs\[0\]\.endAt: 5 is not an RFC 3339 time with an offset"),
        (
            {"endAt": "2030-01-01 00:00:00 +0000 UTC"},
            r"jobs\[0\]\.endAt: .* \(quote it: the Pulumi CLI rewrites an unquoted date\)$",
        ),
    ],
)
def test_a_bad_bound_names_its_key_in_one_line(stack, window, message) -> None:
    with pytest.raises(ProgramFailed, match=message) as failed:
        run_program(stack(**window), "test")
    assert "\n" not in str(failed.value).strip()
