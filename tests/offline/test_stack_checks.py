"""A team's `make test` checks each of its stacks: plan, policy check, capacity verdict."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.clitools import run_module
from tests.stacks import FIXTURE_STACK, machinery_project


def stack_checks(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_module(
        "scheduler_dedup.offline.stack_checks", "--dir", str(project), *args, timeout_s=600
    )


def test_every_stack_is_planned_checked_and_judged_in_a_summary_that_fits_a_screen(
    tmp_path: Path,
) -> None:
    project = machinery_project(tmp_path)
    (project / "Pulumi.second.yaml").write_text(
        (project / f"Pulumi.{FIXTURE_STACK}.yaml").read_text()
    )
    result = stack_checks(project)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    for stack in (FIXTURE_STACK, "second"):
        assert f"== stack {stack}: plan\nsummary: " in result.stdout
        assert f"next: make policy-check STACK={stack}, then pulumi preview" in result.stdout
        assert f"on stack {stack} of {project}" in result.stdout
        assert f"capacity of stack {stack}: " in result.stdout
    assert "Plan for stack" not in result.stdout  # the whole plan only when asked or failing
    assert result.stdout.count("policy check passed: 0 mandatory") == 2
    assert len((result.stdout + result.stderr).splitlines()) <= 20
    assert result.stdout.rstrip().endswith(
        "stack checks passed (2 stack(s): plan, policy check, capacity)"
    )


def test_a_failing_plan_prints_whole(tmp_path: Path) -> None:
    project = machinery_project(tmp_path)
    stack = project / f"Pulumi.{FIXTURE_STACK}.yaml"
    stack.write_text(
        stack.read_text().replace("config:\n", "config:\n  scheduler-dedup:maxInstanes: 3\n", 1)
    )
    result = stack_checks(project)
    assert result.returncode == 2
    assert "error: scheduler-dedup:maxInstanes: unknown key; did you mean" in result.stderr


def test_a_stack_whose_handler_cannot_serve_its_jobs_fails(tmp_path: Path) -> None:
    project = machinery_project(tmp_path)
    stack = project / f"Pulumi.{FIXTURE_STACK}.yaml"
    stack.write_text(
        stack.read_text().replace("config:\n", "config:\n  scheduler-dedup:concurrency: 1\n", 1)
    )
    result = stack_checks(project, "--verbose")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr
    assert f"Plan for stack '{FIXTURE_STACK}' of {project}" in result.stdout
    assert "SHORT: raise concurrency" in result.stdout
    assert result.stdout.rstrip().endswith(
        f"stack checks FAILED: {FIXTURE_STACK} (1 stack(s): plan, policy check, capacity)"
    )


def test_a_project_without_a_stack_file_is_one_error_line(tmp_path: Path) -> None:
    project = machinery_project(tmp_path)
    (project / f"Pulumi.{FIXTURE_STACK}.yaml").unlink()
    result = stack_checks(project)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: no Pulumi.<stack>.yaml in {project}"
