"""The commands say what they do: `make plan` read through a pipe, and its count."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.stacks import FIXTURE_STACK, REPO_ROOT, machinery_project


def _module(module: str, project: Path) -> list[str]:
    return [sys.executable, "-m", module, "--dir", str(project), "--stack", FIXTURE_STACK]


def test_plan_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    command = _module("scheduler_dedup.offline.plan", machinery_project(tmp_path))
    plan = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT)
    assert plan.stdout is not None and plan.stderr is not None
    first = plan.stdout.readline()
    plan.stdout.close()  # what `head -1` does once it has its line
    stderr = plan.stderr.read().decode()
    assert plan.wait(timeout=240) == 0, stderr
    assert first.startswith(f"Plan for stack {FIXTURE_STACK!r}".encode())
    assert "BrokenPipeError" not in stderr and "Traceback" not in stderr


def test_plan_and_policy_check_count_the_same_resources(tmp_path: Path) -> None:
    project = machinery_project(tmp_path)
    plan = subprocess.run(
        _module("scheduler_dedup.offline.plan", project),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO_ROOT,
    )
    check = subprocess.run(
        _module("scheduler_dedup.offline.policy_check", project),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO_ROOT,
    )
    planned = re.search(r"^(\d+) resources: (\d+) provider resources", plan.stdout, re.MULTILINE)
    checked = re.search(r": (\d+) resources$", check.stdout, re.MULTILINE)
    assert planned and checked, plan.stdout[:500] + check.stdout[:500]
    assert planned.group(1) == checked.group(1)
    assert int(planned.group(2)) < int(planned.group(1))
