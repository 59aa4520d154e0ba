"""The commands say what they do: `make plan` read through a pipe, and its count."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.stacks import ANY_STACK, REPO_ROOT


def _module(*args: str) -> list[str]:
    return [sys.executable, "-m", *args, "--dir", str(REPO_ROOT), "--stack", ANY_STACK]


def test_plan_piped_into_head_ends_quietly() -> None:
    plan = subprocess.Popen(
        _module("offline.plan"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT
    )
    assert plan.stdout is not None and plan.stderr is not None
    first = plan.stdout.readline()
    plan.stdout.close()  # what `head -1` does once it has its line
    stderr = plan.stderr.read().decode()
    assert plan.wait(timeout=120) == 0, stderr
    assert first.startswith(f"Plan for stack {ANY_STACK!r}".encode())
    assert "BrokenPipeError" not in stderr and "Traceback" not in stderr


def test_plan_and_policy_check_count_the_same_resources() -> None:
    plan = subprocess.run(
        _module("offline.plan"), capture_output=True, text=True, timeout=120, cwd=REPO_ROOT
    )
    check = subprocess.run(
        _module("offline.policy_check"), capture_output=True, text=True, timeout=120, cwd=REPO_ROOT
    )
    planned = re.search(r"^(\d+) resources: (\d+) provider resources", plan.stdout, re.MULTILINE)
    checked = re.search(r": (\d+) resources$", check.stdout, re.MULTILINE)
    assert planned and checked, plan.stdout[:500] + check.stdout[:500]
    assert planned.group(1) == checked.group(1)
    assert int(planned.group(2)) < int(planned.group(1))
