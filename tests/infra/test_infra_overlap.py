"""A job's `overlap` in the stack config: validated, written into DEDUP_SCHEDULES, charted.

The program runs under mocks on a copy of the project; the entry it writes is
read back with the handler's own parser, and `make plan` shows it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runledger import facts
from runledger.config import Settings
from runledger.exceptions import ConfigError
from runledger.schedules import audit_settings, parse_schedules
from scheduler_dedup.offline.mockrun import ProgramFailed, run_program
from tests.clitools import run_module

NS = "scheduler-dedup:"
FUNCTION = "gcp:cloudfunctionsv2/function:Function"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"


@pytest.fixture
def stack(make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]):
    """The multi-job stack with `overlaps` (job index -> value) set on its jobs."""

    def make(**overlaps: Any) -> Path:
        jobs = multi_job_config[f"{NS}jobs"]
        for index, value in overlaps.items():
            jobs[int(index.removeprefix("job"))]["overlap"] = value
        return make_stack({**multi_job_config, f"{NS}jobs": jobs})

    return make


def entries(resources) -> dict[str, dict[str, Any]]:
    (function,) = [r for r in resources if r.type == FUNCTION]
    env = function.inputs["serviceConfig"]["environmentVariables"]
    return {entry["id"]: entry for entry in json.loads(env["DEDUP_SCHEDULES"])}, env


def test_overlap_is_written_only_when_not_allow_and_the_handler_reads_it(stack) -> None:
    resources = run_program(stack(job0="skip", job1="allow", job2="delay"), "test")

    by_id, env = entries(resources)
    assert by_id["nightly-report"]["overlap"] == "skip"
    assert "overlap" not in by_id["hourly-sync"]  # allow: the entry stays as it was
    assert by_id["invoice-export"]["overlap"] == "delay"
    schedules = {s.id: s for s in audit_settings(env, Settings.from_env(env)).schedules}
    assert {job: s.overlap for job, s in schedules.items()} == {
        "nightly-report": "skip",
        "hourly-sync": "allow",
        "invoice-export": "delay",
    }


def test_the_dashboard_charts_skipped_runs_only_when_a_job_skips(stack) -> None:
    def dashboard(path: Path) -> str:
        (board,) = [r for r in run_program(path, "test") if r.type == DASHBOARD]
        return board.inputs["dashboardJson"]

    plain = dashboard(stack())
    assert facts.OUTCOME_OVERLAP_SKIPPED not in plain
    with_skip = json.loads(dashboard(stack(job1="skip")))
    tiles = with_skip["mosaicLayout"]["tiles"]
    (skipped,) = [t for t in tiles if "skipped" in t["widget"]["title"]]
    query = skipped["widget"]["xyChart"]["dataSets"][0]["timeSeriesQuery"]["timeSeriesFilter"]
    assert f'metric.label.outcome="{facts.OUTCOME_OVERLAP_SKIPPED}"' in query["filter"]
    assert "-runs" in query["filter"]
    assert len(tiles) == len(json.loads(plain)["mosaicLayout"]["tiles"]) + 1


def test_make_plan_shows_overlap_in_the_job_entry(stack) -> None:
    result = run_module(
        "scheduler_dedup.offline.plan",
        "--dir",
        str(stack(job0="skip")),
        "--stack",
        "test",
        timeout_s=120,
    )

    assert result.returncode == 0, result.stderr
    assert '"id":"nightly-report"' in result.stdout
    assert '"overlap":"skip"' in result.stdout
    assert result.stdout.count('"overlap"') == 1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "skipp",
            r"jobs\[0\]\.overlap: 'skipp' is not one of allow, skip, delay; did you mean 'skip'\?",
        ),
        (
            "Delay",
            r"jobs\[0\]\.overlap: 'Delay' is not one of allow, skip, delay; did you mean 'delay'\?",
        ),
        (True, r"jobs\[0\]\.overlap: True is not one of allow, skip, delay$"),
    ],
)
def test_an_unknown_overlap_names_its_key_in_one_line(stack, value, message) -> None:
    with pytest.raises(ProgramFailed, match=message) as failed:
        run_program(stack(job0=value), "test")
    assert "\n" not in str(failed.value).strip()


def test_the_plan_reports_a_bad_overlap_in_one_line(stack) -> None:
    result = run_module(
        "scheduler_dedup.offline.plan",
        "--dir",
        str(stack(job2="forbid")),
        "--stack",
        "test",
        timeout_s=120,
    )

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        "error: scheduler-dedup:jobs[2].overlap: 'forbid' is not one of allow, skip, delay"
    )


def test_the_handler_refuses_an_unknown_overlap_in_dedup_schedules() -> None:
    entry = {"id": "a", "schedule": "0 9 * * *", "timeZone": "UTC", "retryWindowSeconds": 180}
    assert parse_schedules(json.dumps([entry]))[0].overlap == "allow"
    with pytest.raises(ConfigError, match=r"DEDUP_SCHEDULES\[0\] \('a'\): overlap 'never'"):
        parse_schedules(json.dumps([{**entry, "overlap": "never"}]))
