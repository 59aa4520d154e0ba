"""The distribution as a team installs it: a wheel, in a fresh virtualenv, not editable.

The wheel is built (`pip wheel --no-deps`) from a copy of the repository's files (the
tracked and new unignored ones, as `git` lists them) in a temporary directory, so no
`build/` or `*.egg-info` appears in the checkout. A fresh `python -m venv` installs it
without an index. Its dependencies are this session's: a path line in a `.pth` file
puts this virtualenv's site-packages on the fresh one's `sys.path`, and a directory
named that way is only added, its own `.pth` files are not run (`site` processes the
`.pth` files of site directories only), so the editable install of this checkout stays
out: the test checks that no editable finder is active and that every module of the
four packages imports from the fresh virtualenv.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.stacks import FIXTURE_STACK, machinery_project

REPO_ROOT = Path(__file__).resolve().parent.parent
# Each import name the distribution installs, and the folder it is built from.
PACKAGES = {
    "runledger": REPO_ROOT / "handler" / "runledger",
    "dedup_schedule": REPO_ROOT / "infra" / "dedup_schedule",
    "dedup_policies": REPO_ROOT / "policies" / "dedup_policies",
    "scheduler_dedup": REPO_ROOT / "scheduler_dedup",
}
# Run as programs, never imported here: `python -m` entry points, and what the demo's
# handler process loads (beside the deployed `main` module, with the demo's plan in
# DEMO_PLAN_PATH). The fresh virtualenv locates them (find_spec) instead.
RUN_NOT_IMPORTED = (
    "scheduler_dedup.localrun.clocked_handler",
    "scheduler_dedup.localrun.demo_jobs",
    "scheduler_dedup.localrun.demo_naive",
)
# Runs in the fresh virtualenv: every module imported (or located), with where from.
IMPORT_ALL = """
import importlib, importlib.util, json, sys
found, failed = {}, {}
for name in json.loads(sys.argv[1]):
    try:
        if name.endswith(".__main__") or name in json.loads(sys.argv[2]):
            found[name] = importlib.util.find_spec(name).origin
        else:
            found[name] = importlib.import_module(name).__file__
    except Exception as error:
        failed[name] = f"{type(error).__name__}: {error}"
editable = [repr(f) for f in sys.meta_path if "editable" in repr(f).lower()]
editable += [m for m in sys.modules if "editable" in m]
print(json.dumps({"found": found, "failed": failed, "editable": editable}))
"""


def _module_names() -> list[str]:
    """Every module of the four packages, from the source tree."""
    names = []
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.append(".".join((package, *parts)))
    return names


def _sources(target: Path) -> Path:
    """The files `git` lists (tracked, and new unignored ones), copied to `target`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():  # a tracked file deleted in the work tree is not there
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    source = _sources(work / "source")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    (found,) = work.glob("scheduler_dedup-*.whl")
    return found


@pytest.fixture(scope="module")
def fresh_python(wheel: Path) -> Path:
    venv = wheel.parent / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "template_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8"
    )
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    return python


def test_the_wheel_installs_only_the_projects_four_packages(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert top == set(PACKAGES)
    # The function's archive is built from the installed runledger, its pins included.
    assert "runledger/requirements.txt" in names


@pytest.mark.timeout(900)
def test_every_module_imports_from_the_fresh_virtualenv(fresh_python: Path) -> None:
    modules = _module_names()
    assert {"runledger.backfill.plan", "dedup_schedule.monitoring.alerts"} <= set(modules)
    done = subprocess.run(
        [str(fresh_python), "-c", IMPORT_ALL, json.dumps(modules), json.dumps(RUN_NOT_IMPORTED)],
        cwd=fresh_python.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])

    assert result["failed"] == {}
    assert result["editable"] == []
    venv = fresh_python.parent.parent
    outside = {
        name: origin
        for name, origin in result["found"].items()
        if not Path(origin).resolve().is_relative_to(venv.resolve())
    }
    assert outside == {}
    assert sorted(result["found"]) == sorted(modules)


@pytest.mark.timeout(900)
def test_a_copys_plan_archives_the_runledger_installed_in_its_virtualenv(
    wheel: Path, fresh_python: Path, tmp_path: Path
) -> None:
    # A copy's shape: a thin infra/__main__.py, a handler without runledger; the
    # machinery comes from the (not editable) installation only.
    project = machinery_project(tmp_path)
    shutil.rmtree(project / "infra" / "dedup_schedule")
    venv = fresh_python.parent.parent
    command = ["-m", "scheduler_dedup.offline.plan", "--dir", str(project)]
    plan = subprocess.run(
        [str(fresh_python), *command, "--stack", FIXTURE_STACK, "--virtualenv", str(venv)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert plan.returncode == 0, plan.stderr[-3000:]
    (source,) = [line.strip() for line in plan.stdout.splitlines() if "source: <archive" in line]
    with zipfile.ZipFile(wheel) as archive:
        library = [name for name in archive.namelist() if name.startswith("runledger/")]
    assert source.endswith(
        f": jobs.py, main.py, requirements.txt, runledger/ ({len(library)} files)>"
    )
