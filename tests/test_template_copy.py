"""A team copies the template the documented way and makes it its own: everything stays green.

The copy is made as docs/deploy.md says, with `make copy` (the tracked and new
unignored files; no .venv, caches or history). Then, as a team does: every
stack file of the template is deleted, one stack of the team's own is added
(Pulumi.dev.yaml), handler/jobs.py holds the team's jobs and tests/test_jobs.py
tests them. Nothing else is edited.

Two depths, because the copy's whole `make test` builds a .venv and runs the
entire suite again (many minutes):

- always (part of `make test`): in the copy, with this session's interpreter
  pointed at the copy's code (PYTHONPATH, so the editable install of this
  checkout is not used), the team's job test and the machinery tests that would
  break first if anything depended on the example, `scheduler_dedup.offline.plan`,
  `scheduler_dedup.offline.policy_check` and a short `scheduler_dedup.localrun.demo`
  that runs the team's jobs;
- marked `full_copy`, deselected in `make test` and run by `.ci/run` and the
  GitHub workflow (`pytest -m full_copy tests/test_template_copy.py`): a fresh
  `git clone` of the committed copy runs `make test`, `make plan`,
  `make policy-check` and `make demo` exactly as a team types them, its own
  .venv included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
MACHINERY_TESTS = (
    "tests/handler/test_config.py",
    "tests/handler/test_main.py",
    "tests/handler/test_testing.py",
    "tests/infra/test_infra_config.py",
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
    log.info("purging the cache")
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
TEAM_STACK = """config:
  gcp:project: acme-billing-dev
  gcp:region: europe-west1
  scheduler-dedup:jobs:
    - id: billing-close
      schedule: "0 23 * * *"
      timeZone: Europe/Paris
    - id: cache-purge
      schedule: "*/30 * * * *"
      attemptDeadline: 60s
      body: purge
      retry:
        retryCount: 2
"""
TEAM_JOB_IDS = ("billing-close", "cache-purge")


def make_team_copy(target: Path) -> Path:
    """The copy docs/deploy.md describes, with the team's stack, jobs and job test."""
    subprocess.run(
        ["make", "--no-print-directory", "copy", f"DEST={target}"],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    for stack_file in target.glob("Pulumi.*.yaml"):
        stack_file.unlink()
    (target / "Pulumi.dev.yaml").write_text(TEAM_STACK, encoding="utf-8")
    (target / "handler" / "jobs.py").write_text(TEAM_JOBS, encoding="utf-8")
    (target / "tests" / "test_jobs.py").write_text(TEAM_TEST, encoding="utf-8")
    return target


def _clean_env(**extra: str) -> dict[str, str]:
    """This session's environment without what points at this checkout or its emulator."""
    dropped = ("PYTHONPATH", "FIRESTORE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return {**env, **extra}


@pytest.fixture(scope="module")
def team_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_team_copy(tmp_path_factory.mktemp("copies") / "acme-schedules")


def _run(copy: Path, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    """`python ARGS` in the copy, importing the copy's packages, not this checkout's."""
    paths = [copy, copy / "handler", copy / "infra", copy / "policies"]
    env = _clean_env(PYTHONPATH=os.pathsep.join(str(p) for p in paths))
    command = [sys.executable, *args]
    return subprocess.run(
        command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout_s
    )


def test_the_copy_has_none_of_the_originals_state(team_copy: Path) -> None:
    for leftover in (".venv", ".git", ".pytest_cache", ".ruff_cache", ".localrun"):
        assert not (team_copy / leftover).exists(), leftover
    assert not list(team_copy.rglob("__pycache__"))
    assert not list(team_copy.rglob("*.egg-info"))
    assert (team_copy / "Makefile").is_file() and (team_copy / "handler" / "main.py").is_file()


def test_a_venv_copied_from_another_directory_is_rebuilt(tmp_path: Path) -> None:
    # `make -n` shows what make would do: a stamp naming another directory means a rebuild.
    copy = make_team_copy(tmp_path / "copy")
    (copy / ".venv").mkdir()
    (copy / ".venv" / ".installed").write_text(f"{REPO_ROOT}\n")
    dry = subprocess.run(
        ["make", "-n", "venv"], cwd=copy, capture_output=True, text=True, timeout=60
    )
    assert "rm -rf .venv" in dry.stdout and "-m venv .venv" in dry.stdout, dry.stdout
    (copy / ".venv" / ".installed").write_text(f"{copy}\n")
    for name in ("pyproject.toml", *(copy.glob("**/requirements*.txt"))):
        os.utime(copy / name, (1, 1))  # older than the stamp: nothing to install
    dry = subprocess.run(
        ["make", "-n", "venv"], cwd=copy, capture_output=True, text=True, timeout=60
    )
    assert "-m venv" not in dry.stdout, dry.stdout


@pytest.mark.firestore
@pytest.mark.timeout(1800)
def test_machinery_tests_and_the_teams_job_test_pass_with_other_jobs(team_copy: Path) -> None:
    # About a minute on an idle machine; the margin is for a heavily loaded one, where
    # this nested session once took over 600 s.
    result = _run(
        team_copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_jobs.py",
        *MACHINERY_TESTS, timeout_s=1500,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "FIRESTORE EMULATOR MISSING" not in result.stdout
    assert " passed" in result.stdout and "skipped" not in result.stdout


def test_plan_without_a_stack_name_plans_the_teams_only_stack(team_copy: Path) -> None:
    result = _run(team_copy, "-m", "scheduler_dedup.offline.plan")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Plan for stack 'dev'")
    for job in TEAM_JOB_IDS:
        assert f"+ gcp:cloudscheduler/job:Job  dedup-job-{job}" in result.stdout
    assert "nightly-report" not in result.stdout
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("summary: ") and "billing-close, cache-purge" in last


def test_policy_check_without_a_stack_name_checks_the_teams_stack(team_copy: Path) -> None:
    result = _run(team_copy, "-m", "scheduler_dedup.offline.policy_check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert " on stack dev of " in result.stdout
    assert "policy check passed: 0 mandatory" in result.stdout


@pytest.mark.firestore
@pytest.mark.timeout(600)
def test_the_demo_runs_the_teams_own_jobs(team_copy: Path) -> None:
    result = _run(team_copy, "-m", "scheduler_dedup.localrun.demo", "--runs", "2")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    out = result.stdout
    assert "work: your jobs from handler/jobs.py" in out
    # The team's own log lines, each with its run.
    assert "billing-close" in out and "closing the books at" in out
    verdict = out.strip().splitlines()[-1]
    assert verdict.startswith("verdict: exactly once HOLDS"), verdict
    assert "billing-close, cache-purge" in verdict or "cache-purge, billing-close" in verdict


def _make(clone: Path, target: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """`make TARGET` in its own session, so that on a timeout all it started can be ended."""
    command = ["make", "--no-print-directory", target]
    process = subprocess.Popen(
        command,
        cwd=clone,
        env=_clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # Ctrl-C first: pytest then stops its session's emulator (its own session) itself.
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.firestore
@pytest.mark.timeout(3600)
@pytest.mark.full_copy
def test_a_fresh_clone_of_the_teams_copy_is_green_with_the_commands_a_team_types(
    tmp_path: Path,
) -> None:
    copy = make_team_copy(tmp_path / "acme-schedules")
    git = ["git", "-c", "user.name=Acme", "-c", "user.email=dev@acme.example"]
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True, timeout=60)
    subprocess.run(["git", "add", "-A"], cwd=copy, check=True, timeout=60)
    subprocess.run([*git, "commit", "-q", "-m", "From the template"], cwd=copy, check=True)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(copy), str(clone)], check=True, timeout=120)

    for target, budget_s in (("test", 2400), ("plan", 600), ("policy-check", 600)):
        result = _make(clone, target, budget_s)
        assert result.returncode == 0, f"make {target}\n{result.stdout[-4000:]}{result.stderr}"
    assert (clone / ".venv" / ".installed").read_text().strip() == str(clone)
    demo = _make(clone, "demo", 900)
    assert demo.returncode == 0, demo.stdout[-4000:] + demo.stderr
    verdict = demo.stdout.strip().splitlines()[-1]
    assert verdict.startswith("verdict: exactly once HOLDS") and "billing-close" in verdict
