"""The function's source archive: the team's files, the installed runledger, one requirements.txt.

`handler_archive` takes runledger from a folder (the installed package's by
default); these tests give it a small stand-in library so a new pin (other
runledger content) can be shown to rename the archive.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import runledger
from dedup_schedule.source import LIBRARY_DIR, HandlerSourceError, handler_archive
from scheduler_dedup.offline.mockrun import ProgramFailed, run_program
from tests.infra.conftest import REPO, write_handler

TEAM = {
    "main.py": "def handle_scheduled_job(request): ...\n",
    "jobs.py": "JOBS = {}\n",
    "requirements.txt": "# ours\nfunctions-framework\nrequests==2.34.2\n",
}
LIBRARY = {
    "__init__.py": '__version__ = "0.2.0"\n',
    "ledger/machine.py": "STATES = ()\n",
    "requirements.txt": "functions-framework==3.10.2\ncroniter==7.0.0\n",
}


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    handler, library = tmp_path / "handler", tmp_path / "site-packages" / "runledger"
    write_handler(handler, TEAM)
    write_handler(library, LIBRARY)
    return handler, library


def test_a_copys_archive_holds_its_files_and_runledger_with_runledgers_requirements_first(
    dirs: tuple[Path, Path],
) -> None:
    handler, library = dirs
    archive = handler_archive(handler, library)

    assert sorted(archive.files) == [
        "jobs.py",
        "main.py",
        "runledger/__init__.py",
        "runledger/ledger/machine.py",
        "runledger/requirements.txt",
    ]
    lines = [line for line in archive.requirements.splitlines() if not line.startswith("#")]
    # The team's bare functions-framework is runledger's pin; its own requirement stays.
    assert lines == ["functions-framework==3.10.2", "croniter==7.0.0", "requests==2.34.2"]


@pytest.mark.parametrize(
    "change",
    [
        {"ledger/machine.py": "STATES = ('claimed',)\n"},
        {"requirements.txt": "functions-framework==3.10.2\ncroniter==7.0.1\n"},
        {"audit/new.py": ""},
    ],
)
def test_new_runledger_content_renames_the_archive(
    dirs: tuple[Path, Path], change: dict[str, str]
) -> None:
    handler, library = dirs
    before = handler_archive(handler, library).digest()
    assert handler_archive(handler, library).digest() == before

    write_handler(library, change)

    assert handler_archive(handler, library).digest() != before


def test_a_team_pin_other_than_runledgers_is_refused_naming_the_file(
    dirs: tuple[Path, Path],
) -> None:
    handler, library = dirs
    (handler / "requirements.txt").write_text("croniter == 6.0.0  # older\n")

    with pytest.raises(HandlerSourceError) as caught:
        handler_archive(handler, library)

    assert str(caught.value) == (
        f"{handler / 'requirements.txt'}: 'croniter == 6.0.0  # older' differs from runledger "
        f"{runledger.__version__}'s 'croniter==7.0.0' (runledger/requirements.txt); remove the "
        "line (the function installs runledger's) or make it the same"
    )


def test_a_runledger_in_the_handler_other_than_the_installed_one_is_refused(
    dirs: tuple[Path, Path],
) -> None:
    handler, library = dirs
    write_handler(handler, {"runledger/__init__.py": ""})

    with pytest.raises(HandlerSourceError, match="is not the installed runledger"):
        handler_archive(handler, library)


def test_the_templates_archive_holds_its_runledger_once() -> None:
    # Under the editable install the installed runledger is handler/runledger itself.
    assert (REPO / "handler" / "runledger").resolve() == LIBRARY_DIR
    archive = handler_archive(REPO / "handler")

    on_disk = {
        path.relative_to(REPO / "handler").as_posix()
        for path in (REPO / "handler").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    # The handler's requirements.txt is composed into the archive's, not copied.
    assert set(archive.files) == on_disk - {"requirements.txt"}
    assert archive.files["runledger/facts.py"] == LIBRARY_DIR / "facts.py"


def test_a_different_pin_in_the_teams_requirements_stops_the_program(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    project = make_stack(multi_job_config)
    (project / "handler" / "requirements.txt").write_text("functions-framework==3.0.0\n")

    with pytest.raises(ProgramFailed) as caught:
        run_program(project, "test")

    assert "requirements.txt: 'functions-framework==3.0.0' differs from runledger" in str(
        caught.value
    )
