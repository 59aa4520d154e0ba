"""A `pulumi up` that creates the program's virtualenv itself installs everything it imports.

With `.venv` missing, the Pulumi CLI's Python language host creates it and runs
`python -m pip install -r requirements.txt` in the program directory (`main`), not
in the project root (pulumi/pulumi sdk/python/toolchain/pip.go, InstallDependencies).
pip resolves a local path such as `-e ..` against that working directory, and a
nested `-r` file against the file that names it; these tests read the files the
same way.
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import setuptools
import yaml

REPO = Path(__file__).resolve().parents[2]


def program_dir() -> Path:
    document = yaml.safe_load((REPO / "Pulumi.yaml").read_text(encoding="utf-8"))
    return (REPO / document["main"]).resolve()


def read_requirements(path: Path, cwd: Path) -> tuple[dict[str, str], list[Path]]:
    """(pinned name -> version, editable paths) of a requirements file, as pip reads it."""
    pins: dict[str, str] = {}
    editables: list[Path] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r "):
            nested_pins, nested_editables = read_requirements(path.parent / line[3:].strip(), cwd)
            pins.update(nested_pins)
            editables.extend(nested_editables)
        elif line.startswith("-e "):
            editables.append((cwd / line[3:].strip()).resolve())
        else:
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line!r} is not pinned"
            pins[name.strip().lower()] = version.strip()
    return pins, editables


def test_the_program_requirements_install_the_repository_packages_it_imports() -> None:
    program = program_dir()
    pins, editables = read_requirements(program / "requirements.txt", cwd=program)

    # The program imports runledger (handler/) and dedup_schedule (infra/): both come
    # from the repository's own editable install, resolved from the program directory.
    assert editables == [REPO]
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    find = project["tool"]["setuptools"]["packages"]["find"]
    found = {
        name
        for where in find["where"]
        for name in setuptools.find_packages(REPO / where, include=find["include"])
    }
    assert {"runledger", "dedup_schedule"} <= found
    assert {"pulumi", "pulumi-gcp", "pulumiverse-time"} <= set(pins)


def test_the_program_pins_are_the_versions_the_tests_run_with() -> None:
    program = program_dir()
    pins, _ = read_requirements(program / "requirements.txt", cwd=program)

    for name, version in pins.items():
        assert importlib.metadata.version(name) == version, name


def test_make_venv_installs_the_same_pins_from_the_repository_root() -> None:
    # `make venv` runs pip in the repository root, where `-e ..` would name the wrong
    # directory: it takes the pins through requirements-sdk.txt and `-e .` itself.
    program = program_dir()
    program_pins, _ = read_requirements(program / "requirements.txt", cwd=program)
    dev_pins, dev_editables = read_requirements(REPO / "requirements-dev.txt", cwd=REPO)

    assert dev_editables == [REPO]
    for name, version in program_pins.items():
        assert dev_pins[name] == version, name
