"""User errors get one `error:` line and exit 2, never a stack trace."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from scheduler_dedup.localrun.demo_stack import StackError, load_stack
from tests.clitools import run_module
from tests.localrun.demo_project import DEMO_PROJECT


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("scheduler_dedup.localrun.demo", *args, timeout_s=180)


def test_unknown_stack_is_one_error_line_and_exit_2() -> None:
    result = _demo("--dir", str(DEMO_PROJECT), "--stack", "nope")
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown stack 'nope'")
    assert "(stacks here: demo)" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr + result.stdout


def test_several_stacks_and_no_stack_named_is_one_line_listing_them(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: scheduler-dedup\n")
    for stack in ("dev", "prod"):
        (tmp_path / f"Pulumi.{stack}.yaml").write_text("config: {}\n")
    result = _demo("--dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith("error: several stacks in ")
    assert "(dev, prod)" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_bad_run_count_is_a_usage_error() -> None:
    result = _demo("--runs", "0")
    assert result.returncode == 2
    assert "--runs must be between 1 and" in result.stderr
    assert "Traceback" not in result.stderr


def test_invalid_stack_config_names_the_key(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: scheduler-dedup\n")
    (tmp_path / "Pulumi.bad.yaml").write_text(
        "config:\n  gcp:project: acme-scheduling-prod\n  gcp:region: europe-west1\n"
        "  scheduler-dedup:jobs:\n    - id: x\n      schedule: every 5 minutes\n"
    )
    with pytest.raises(StackError, match=r"^scheduler-dedup:jobs\[0\]\.schedule: "):
        load_stack("bad", tmp_path)
