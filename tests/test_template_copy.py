"""A team copies the template and replaces the example jobs: its suite and plan stay green.

The test copies the tracked (and new, unignored) files into a temporary
directory, replaces `handler/jobs.py`, the stack's jobs in
`Pulumi.example.yaml` and the example jobs' test with a team's own, then runs
there what would break first if the machinery depended on the example: the
handler's tests (config, the served entry point, the test harness), the stack
tests, the team's job test and `python -m offline.plan`. It reuses this
session's interpreter; the copy's pytest starts its own Firestore emulator.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
MACHINERY_TESTS = (
    "tests/handler/test_config.py",
    "tests/handler/test_main.py",
    "tests/handler/test_testing.py",
    "tests/infra/test_infra_config.py",
    "tests/infra/test_infra_targets.py",
)
TEAM_JOBS = '''"""Acme's jobs."""

from __future__ import annotations

import logging

from runledger import Jobs, RunContext, TerminalJobError

JOBS = Jobs()
log = logging.getLogger(__name__)


@JOBS.job("billing-close")
def billing_close(ctx: RunContext) -> None:
    total = ctx.stage("sum", lambda: 42)
    log.info("closing the books at %s: %s", ctx.schedule_time, total)


@JOBS.job("cache-purge")
def cache_purge(ctx: RunContext) -> None:
    if ctx.body != b"purge":
        raise TerminalJobError("nothing to purge")
'''
TEAM_TEST = '''"""Acme's job tests, written with runledger.testing."""

from __future__ import annotations

from jobs import JOBS

from runledger.testing import JobHarness


def test_billing_close_runs_once_when_delivered_twice():
    harness = JobHarness(JOBS)
    assert harness.deliver("billing-close").outcome == "completed"
    assert harness.deliver("billing-close").ran is False
    assert harness.executions("billing-close") == 1


def test_cache_purge_without_a_body_is_never_retried():
    harness = JobHarness(JOBS)
    assert harness.deliver("cache-purge").outcome == "failed_terminal"
    assert harness.deliver("cache-purge").outcome == "duplicate_failed"
'''
TEAM_STACK_JOBS = [
    {"id": "billing-close", "schedule": "0 23 * * *", "timeZone": "Europe/Paris"},
    {
        "id": "cache-purge",
        "schedule": "*/30 * * * *",
        "attemptDeadline": "60s",
        "retry": {"retryCount": 2},
    },
]


def _copy_template(target: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():  # a tracked file deleted in the work tree is not copied
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _replace_the_jobs(copy: Path) -> None:
    (copy / "handler" / "jobs.py").write_text(TEAM_JOBS, encoding="utf-8")
    (copy / "tests" / "test_jobs.py").write_text(TEAM_TEST, encoding="utf-8")
    stack_file = copy / "Pulumi.example.yaml"
    stack = yaml.safe_load(stack_file.read_text(encoding="utf-8"))
    stack["config"]["scheduler-dedup:jobs"] = TEAM_STACK_JOBS
    stack["config"].pop("scheduler-dedup:requestTimeout", None)
    stack_file.write_text(yaml.safe_dump(stack, sort_keys=False), encoding="utf-8")


@pytest.fixture(scope="module")
def team_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("team-template")
    _copy_template(copy)
    _replace_the_jobs(copy)
    return copy


def _run(copy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FIRESTORE_EMULATOR_HOST")
    }
    return subprocess.run(
        [sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.firestore
@pytest.mark.timeout(900)
def test_machinery_tests_and_the_teams_job_test_pass_with_other_jobs(team_copy: Path) -> None:
    result = _run(
        team_copy,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/test_jobs.py",
        *MACHINERY_TESTS,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "FIRESTORE EMULATOR MISSING" not in result.stdout
    assert " passed" in result.stdout and "skipped" not in result.stdout


def test_make_plan_shows_the_teams_jobs(team_copy: Path) -> None:
    result = _run(team_copy, "-m", "offline.plan", "--dir", ".", "--stack", "example")
    assert result.returncode == 0, result.stderr
    for job in TEAM_STACK_JOBS:
        assert f"+ gcp:cloudscheduler/job:Job  dedup-job-{job['id']}" in result.stdout
    assert "nightly-report" not in result.stdout
