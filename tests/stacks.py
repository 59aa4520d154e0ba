"""The repository's own stacks, and the machinery tests' fixture stack.

Tests that check what a team deploys parametrize over every `Pulumi.<stack>.yaml`
beside Pulumi.yaml, so a team that deletes the example stack and adds its own
gets its own checked. Tests of the machinery itself never read those files, nor
handler/jobs.py: they use the fixture stack (tests/fixture_project, a copy of
the template's example stack) and a project copy whose jobs module defines its
jobs, so they stay green whatever stack and jobs a team puts in the repo. (The
demo's tests have their own, tests/localrun/stack.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

from dedup_schedule.config.model import ScheduleConfig
from dedup_schedule.config.parser import parse_config
from scheduler_dedup.offline.stack_file import (
    read_project_name,
    read_stack_values,
    stack_file,
    stack_names,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
REPO_STACKS = tuple(stack_names(REPO_ROOT))
# The template's own handler and policy pack (the tools default to the current directory's).
HANDLER_DIR = REPO_ROOT / "handler"
PACK_DIR = REPO_ROOT / "policies"
# Three jobs in three time zones, retries from none to five, deadlines from 2 to 15 minutes;
# it passes the policy pack with no violation, advisory ones included.
FIXTURE_DIR = Path(__file__).resolve().parent / "fixture_project"
FIXTURE_STACK = "example"


def repo_stack_file(stack: str) -> Path:
    return stack_file(REPO_ROOT, stack)


def fixture_values() -> dict[str, object]:
    """The fixture stack's config values, as `pulumi config` holds them (a fresh dict)."""
    return read_stack_values(FIXTURE_DIR, FIXTURE_STACK)


def fixture_config() -> ScheduleConfig:
    """The fixture stack, parsed as the program parses a stack."""
    return parse_config(fixture_values(), read_project_name(FIXTURE_DIR))


def machinery_project(directory: Path) -> Path:
    """A copy of the Pulumi project (program and handler) that deploys the fixture stack.

    The copy's handler/jobs.py defines the fixture's jobs, in place of the team's, so
    the program's check that the handler defines every job passes without them. Its
    handler/ holds no runledger, as a team's copy: the archive takes the installed one.
    """
    project = directory / "my-schedule"
    project.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".venv", "venv")
    shutil.copy2(REPO_ROOT / "Pulumi.yaml", project / "Pulumi.yaml")
    shutil.copytree(REPO_ROOT / "infra", project / "infra", ignore=ignore)
    shutil.copytree(
        REPO_ROOT / "handler",
        project / "handler",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "runledger"),
    )
    shutil.copy2(stack_file(FIXTURE_DIR, FIXTURE_STACK), stack_file(project, FIXTURE_STACK))
    ids = tuple(job.id for job in fixture_config().jobs)
    (project / "handler" / "jobs.py").write_text(
        f"JOBS = {{job: print for job in {ids!r}}}\n", encoding="utf-8"
    )
    return project
