"""Fixtures for the infrastructure tests: disposable copies of the Pulumi project.

Each test runs the real program (`infra/__main__.py`) through `scheduler_dedup.offline.mockrun` on
a copy in a temporary directory, with a small stand-in handler, so tests can edit
stack config and handler code freely and never depend on the live `handler/` tree.

A run costs seconds of CPU, and many tests only read what one stack config
registers: `shared_run` runs the program once per distinct config on an untouched
copy and hands each test its own deep copy of the result.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dedup_schedule.custom_roles import base36
from scheduler_dedup.offline.gcp_mocks import mock_static_time
from scheduler_dedup.offline.mockrun import ProgramResources, run_program

REPO = Path(__file__).resolve().parents[2]

# A team's handler as a copy holds it: no runledger (the archive takes the installed one).
HANDLER_FILES = {
    "main.py": "def handle_scheduled_job(request):\n    return 'ok', 200\n",
    "requirements.txt": "functions-framework==3.10.2\n",
    # Defines the job ids the tests' stacks use: the program checks the handler has each.
    "jobs.py": (
        "JOBS = {job: print for job in "
        "('nightly-report', 'hourly-sync', 'invoice-export', 'reindex')}\n"
    ),
}

# A multi-job stack: different time zones, deadlines, retry policies, a request body.
MULTI_JOB_CONFIG: dict[str, Any] = {
    "gcp:project": "dedup-test-project",
    "gcp:region": "europe-west3",
    "scheduler-dedup:database": {"name": "run-ledger", "pointInTimeRecovery": True},
    "scheduler-dedup:manualRuns": "reject",
    "scheduler-dedup:maxInstances": 4,
    "scheduler-dedup:concurrency": 2,
    "scheduler-dedup:jobs": [
        {
            "id": "nightly-report",
            "schedule": "15 1 * * *",
            "timeZone": "Europe/Berlin",
            "description": "Nightly report",
            "attemptDeadline": "10m",
            "body": '{"kind": "report"}',
            "retry": {
                "retryCount": 3,
                "maxRetryDuration": "2h",
                "minBackoffDuration": "30s",
                "maxBackoffDuration": "300s",
                "maxDoublings": 2,
            },
        },
        {
            "id": "hourly-sync",
            "schedule": "*/15 * * * 1-5",
            "attemptDeadline": "60s",
            "retry": {"retryCount": 5},
        },
        {
            "id": "invoice-export",
            "schedule": "0 7 1 JAN,JUL *",
            "timeZone": "America/New_York",
        },
    ],
}


def role_id(role: str, stem: str) -> str:
    """The role id the program gives the custom role resource `role` under the mocks:
    `stem` and when its `<role>-created` Static says it was created."""
    return f"{stem}_{base36(int(mock_static_time(f'{role}-created').timestamp()))}"


def role_name(project: str, role: str, stem: str) -> str:
    """The full name of that role (`projects/P/roles/ID`), as grants name it."""
    return f"projects/{project}/roles/{role_id(role, stem)}"


def write_handler(handler_dir: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = handler_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def write_stack(project_dir: Path, stack: str, config: dict[str, Any]) -> None:
    document = {"config": config}
    (project_dir / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")


def copy_project(directory: Path) -> Path:
    """A copy of the Pulumi project (Pulumi.yaml, infra/) with a stand-in handler."""
    target = directory / "project"
    target.mkdir()
    shutil.copy2(REPO / "Pulumi.yaml", target / "Pulumi.yaml")
    shutil.copytree(REPO / "infra", target / "infra", ignore=shutil.ignore_patterns("__pycache__"))
    write_handler(target / "handler", HANDLER_FILES)
    return target


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    return copy_project(tmp_path)


@pytest.fixture
def multi_job_config() -> dict[str, Any]:
    """A fresh copy of the multi-job stack config, safe to edit."""
    return copy.deepcopy(MULTI_JOB_CONFIG)


@pytest.fixture
def make_stack(project_copy: Path) -> Callable[[dict[str, Any]], Path]:
    """Write `Pulumi.test.yaml` with the given config into the project copy."""

    def make(config: dict[str, Any]) -> Path:
        write_stack(project_copy, "test", config)
        return project_copy

    return make


def tree_digest(directory: Path) -> str:
    """A digest of every file under `directory` (relative path and content)."""
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(directory)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


class SharedRuns:
    """Runs of the program on an untouched project copy, one per distinct stack config.

    The program is deterministic under mocks: equal config on an equal copy gives
    an equal result, so it runs once per config (a failing run is not kept: it
    runs, and fails, again). Each caller gets its own deep copy, so no test sees
    another's edits.
    """

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self._factory = factory
        self._runs: dict[str, ProgramResources] = {}
        self.pristine = tree_digest(copy_project(factory.mktemp("pristine")))

    def __call__(self, config: dict[str, Any], stack: str = "test") -> ProgramResources:
        key = json.dumps([stack, config], sort_keys=True)
        if key not in self._runs:
            project = copy_project(self._factory.mktemp("shared-run"))
            write_stack(project, stack, config)
            self._runs[key] = run_program(project, stack)
        return copy.deepcopy(self._runs[key])


@pytest.fixture(scope="session")
def shared_run(tmp_path_factory: pytest.TempPathFactory) -> SharedRuns:
    return SharedRuns(tmp_path_factory)
