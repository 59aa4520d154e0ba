"""A job's `suspendAfterFailures` in the stack config: validated, written, alerted on, charted.

The program runs under mocks on a copy of the project; the entry it writes is read
back with the handler's own parser.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runledger import facts
from runledger.config import Settings
from runledger.schedules import audit_settings
from scheduler_dedup.offline.mockrun import ProgramFailed, run_program

NS = "scheduler-dedup:"
FUNCTION = "gcp:cloudfunctionsv2/function:Function"
POLICY = "gcp:monitoring/alertPolicy:AlertPolicy"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"


@pytest.fixture
def stack(make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]):
    def make(**keys: Any) -> Path:
        jobs = multi_job_config[f"{NS}jobs"]
        jobs[0].update(keys)
        return make_stack({**multi_job_config, f"{NS}jobs": jobs})

    return make


def test_the_threshold_reaches_the_handler_and_the_alert_and_dashboard_follow(stack) -> None:
    resources = run_program(stack(suspendAfterFailures=5), "test")

    (function,) = [r for r in resources if r.type == FUNCTION]
    env = function.inputs["serviceConfig"]["environmentVariables"]
    entries = {entry["id"]: entry for entry in json.loads(env["DEDUP_SCHEDULES"])}
    assert entries["nightly-report"]["suspendAfterFailures"] == 5
    assert "suspendAfterFailures" not in entries["hourly-sync"]
    (job, *_) = audit_settings(env, Settings.from_env(env)).schedules
    assert job.suspend_after == 5
    policies = {r.inputs["displayName"]: r for r in resources if r.type == POLICY}
    (condition,) = policies["dedup: Job suspended"].inputs["conditions"]
    selector = condition["conditionThreshold"]["filter"]
    assert "user/dedup-findings" in selector and f'"{facts.OUTCOME_JOB_SUSPENDED}"' in selector
    link = "docs/runbook.md#alert-job-suspended"
    content = policies["dedup: Job suspended"].inputs["documentation"]["content"]
    assert content.endswith(f"\n\nRunbook: [{link}]({link})")
    (board,) = [r for r in resources if r.type == DASHBOARD]
    tiles = json.loads(board.inputs["dashboardJson"])["mosaicLayout"]["tiles"]
    titles = [tile["widget"]["title"] for tile in tiles]
    assert "Runs not run: job suspended, by job" in titles
    (panel,) = [tile["widget"]["logsPanel"] for tile in tiles if "logsPanel" in tile["widget"]]
    assert panel["filter"].endswith(f'jsonPayload.outcome="{facts.OUTCOME_JOB_SUSPENDED}"')


def test_without_a_threshold_there_is_no_suspension_alert(stack) -> None:
    resources = run_program(stack(), "test")
    titles = {r.inputs["displayName"] for r in resources if r.type == POLICY}
    assert "dedup: Job suspended" not in titles


@pytest.mark.parametrize("value", [0, 1001, "many", True])
def test_a_bad_threshold_names_its_key_in_one_line(stack, value) -> None:
    with pytest.raises(ProgramFailed, match=r"jobs\[0\]\.suspendAfterFailures: ") as failed:
        run_program(stack(suspendAfterFailures=value), "test")
    assert "\n" not in str(failed.value).strip()
