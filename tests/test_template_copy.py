"""A team makes its repository with `copier copy` and keeps it current with `copier update`.

The copy holds only the team's files (copier.yml, template/); the machinery is the
`scheduler-dedup` package, pinned at the template commit the copy was made from.
Copier renders committed state: each test copies from a `git clone` of this
checkout, as a team's template source would be.

Two depths:

- always (part of `make test`, seconds): the file set (no machinery source), the
  answers, the pin, the stack file with the answered values (valid for the program),
  the entry points equal to the template's, the README's first screen, renders that
  do not depend on the folder copier renders in, and the questions' validation;
- marked `full_copy`, deselected in `make test` and run by `.ci/run` and the GitHub
  workflow (`pytest -m full_copy tests/test_template_copy.py`): the check a copy
  depends on. A copy made from the previous release (`PREVIOUS_RELEASE`), with a
  team's stack (a `*/15` job whose retry window outlasts its interval among its
  jobs), jobs and test, runs its own `make test` (its own .venv, the machinery
  installed from the pin); then `copier update` to HEAD, with `--conflict rej` and
  with `--conflict inline`, moves the pin, leaves no conflict marker or `.rej` in any
  file and the team's files byte-identical, and `make test` passes again on the new
  machinery.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dedup_schedule.config.parser import _PREFIX, parse_config
from dedup_schedule.config.values import PROJECT_ID, REGION
from dedup_schedule.job_ids import handler_job_ids
from scheduler_dedup.offline.stack_file import read_project_name, read_stack_values

REPO_ROOT = Path(__file__).resolve().parent.parent
ANSWERS = {
    "gcp_project": "acme-sched-dev",
    "gcp_region": "europe-west1",
    "name_prefix": "acme",
    "stack": "dev",
}
COPY_FILES = {
    ".copier-answers.yml",
    ".github/workflows/ci.yml",
    ".gitignore",
    "Makefile",
    "Pulumi.dev.yaml",
    "Pulumi.yaml",
    "README.md",
    "handler/jobs.py",
    "handler/main.py",
    "handler/requirements.txt",
    "infra/__main__.py",
    "infra/requirements.txt",
    "policies/PulumiPolicy.yaml",
    "policies/__main__.py",
    "policies/requirements.txt",
    "requirements-dev.txt",
    "requirements-machinery.txt",
    "ruff.toml",
    "tests/test_jobs.py",
}
# The template's own files a copy carries unchanged (copier includes them); the
# example jobs and their tests are the team's to replace.
SHARED_FILES = (
    "Pulumi.yaml",
    "handler/jobs.py",
    "tests/test_jobs.py",
    "infra/__main__.py",
    "handler/main.py",
    "handler/requirements.txt",
    "policies/PulumiPolicy.yaml",
    "policies/__main__.py",
)
MACHINERY = ("runledger", "dedup_schedule", "dedup_policies", "scheduler_dedup")


def _git(cwd: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=Acme", "-c", "user.email=dev@acme.example", *args]
    done = subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def _clean_env() -> dict[str, str]:
    """This session's environment without what points at this checkout or its emulator."""
    dropped = ("PYTHONPATH", "FIRESTORE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if k not in dropped}


def copier(cwd: Path, *args: str, **answers: str) -> subprocess.CompletedProcess[str]:
    """`copier ARGS --trust --defaults --data K=V...` as a team types it."""
    data = [f"--data={key}={value}" for key, value in answers.items()]
    command = [sys.executable, "-m", "copier", *args, "--trust", "--defaults", *data]
    return subprocess.run(
        command, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's committed state, as the Git repository a team copies from."""
    clone = tmp_path_factory.mktemp("template") / "scheduler-dedup"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True, timeout=300)
    return clone


@pytest.fixture(scope="module")
def copy(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("copies") / "acme-schedules"
    made = copier(source, "copy", "--vcs-ref", "HEAD", str(source), str(target), **ANSWERS)
    assert made.returncode == 0, made.stderr
    return target


def files(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}


def pin(directory: Path) -> str:
    lines = (directory / "requirements-machinery.txt").read_text().splitlines()
    (requirement,) = [line for line in lines if line and not line.startswith("#")]
    return requirement


def test_the_copy_holds_only_the_teams_files_and_no_machinery(copy: Path) -> None:
    assert files(copy) == COPY_FILES
    for package in MACHINERY:
        assert not list(copy.rglob(package)), package


def test_the_copy_records_its_answers_and_the_template_commit(copy: Path, source: Path) -> None:
    answers = yaml.safe_load((copy / ".copier-answers.yml").read_text())
    assert {key: answers[key] for key in ANSWERS} == ANSWERS
    assert answers["_src_path"] == str(source)
    head = _git(source, "rev-parse", "HEAD")
    assert head.startswith(answers["_commit"].rsplit("-g", 1)[-1])


def test_the_machinery_is_pinned_once_at_the_commit_the_copy_was_made_from(
    copy: Path, source: Path
) -> None:
    head = _git(source, "rev-parse", "HEAD")
    assert pin(copy) == f"scheduler-dedup @ git+file://localhost{source}@{head}"
    # Every other requirements file reads the pin; none names the machinery itself.
    readers = ("requirements-dev.txt", "infra/requirements.txt", "policies/requirements.txt")
    for name in readers:
        text = (copy / name).read_text()
        assert "requirements-machinery.txt" in text, name
        assert "scheduler-dedup" not in text, name
    assert "-r requirements-machinery.txt" in (copy / "requirements-dev.txt").read_text()


def test_the_stack_file_has_the_answers_and_schedules_every_example_job(copy: Path) -> None:
    values = read_stack_values(copy, "dev")
    assert values["gcp:project"] == "acme-sched-dev"
    assert values["gcp:region"] == "europe-west1"
    config = parse_config(values, read_project_name(copy))
    assert config.name_prefix == "acme"
    # The example jobs and the example stack agree: no function that never runs.
    defined = handler_job_ids(copy / "handler", "jobs", "handlerDir")
    assert sorted(job.id for job in config.jobs) == sorted(defined)


def test_the_entry_points_are_the_templates_own(copy: Path, source: Path) -> None:
    for name in SHARED_FILES:
        assert (copy / name).read_bytes() == (source / name).read_bytes(), name
    assert "virtualenv: .venv" in (copy / "Pulumi.yaml").read_text()
    assert ".venv/" in (copy / ".gitignore").read_text().splitlines()


def test_no_rendered_file_depends_on_the_folder_copier_renders_in(
    copy: Path, source: Path, tmp_path: Path
) -> None:
    # `copier update` renders the old and the new version in temporary folders and
    # merges their difference into the copy: a value that follows the folder (the
    # `_folder_name` title the README once had) conflicts on every update.
    elsewhere = tmp_path / "another-name"
    made = copier(source, "copy", "--vcs-ref", "HEAD", str(source), str(elsewhere), **ANSWERS)
    assert made.returncode == 0, made.stderr
    assert files(elsewhere) == files(copy)
    for name in sorted(files(copy)):
        assert (elsewhere / name).read_bytes() == (copy / name).read_bytes(), name


def test_the_readme_first_screen_says_how_to_get_copier_and_to_commit_first(copy: Path) -> None:
    first_screen = "\n".join((copy / "README.md").read_text().splitlines()[:24])
    (pinned,) = [
        line
        for line in (REPO_ROOT / "requirements-dev.txt").read_text().splitlines()
        if line.startswith("copier==")
    ]
    assert f"pipx install {pinned}" in first_screen
    commit = "git init && git add -A && git commit"
    assert commit in first_screen
    assert first_screen.index("a first commit") < first_screen.index(commit)


def _dry_make(copy: Path, *targets: str) -> str:
    """What `make TARGETS` would run (`make -n`), without running it."""
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", *targets],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_the_next_make_reinstalls_the_machinery_when_the_pin_moves(
    copy: Path, tmp_path: Path
) -> None:
    team = tmp_path / "team"
    shutil.copytree(copy, team)
    first = _dry_make(team, "venv")
    assert "--force-reinstall --no-deps -r requirements-machinery.txt" in first
    (team / ".venv" / "bin").mkdir(parents=True)
    (team / ".venv" / "bin" / "python").symlink_to(sys.executable)
    shutil.copy(team / "requirements-machinery.txt", team / ".venv" / ".machinery")
    assert "pip install" not in _dry_make(team, "venv")
    # copier update rewrote the pin: the stamp no longer matches it.
    pinned = (team / "requirements-machinery.txt").read_text().strip()
    moved_pin = pinned.rsplit("@", 1)[0] + "@" + "0" * 40 + "\n"
    (team / "requirements-machinery.txt").write_text(moved_pin)
    os.utime(team / "requirements-machinery.txt", (1, 1))  # older than the stamp: content decides
    os.utime(team / "requirements-dev.txt", (1, 1))
    moved = _dry_make(team, "venv")
    assert "--force-reinstall --no-deps -r requirements-machinery.txt" in moved
    assert "cp requirements-machinery.txt .venv/.machinery" in moved


def test_every_command_of_the_copy_runs_the_installed_package_on_the_copy(
    copy: Path, tmp_path: Path
) -> None:
    team = _team_with_this_venv(copy, tmp_path)
    expected = {
        "test": "-m scheduler_dedup.offline.stack_checks --dir .",
        "test-jobs": "-q -p no:cacheprovider tests/test_jobs.py",
        "plan": "-m scheduler_dedup.offline.plan --dir .",
        "policy-check": "-m scheduler_dedup.offline.policy_check --dir .",
        "demo": "-m scheduler_dedup.localrun.demo",
        "demo-stop": "-m scheduler_dedup.localrun.demo_keep stop",
        "simulate": "-m scheduler_dedup.localrun.simulation",
        "ops": "-m runledger.ops",
        "lint": "-m ruff check .",
        "fix": "-m ruff check --fix .",
    }
    for target, command in expected.items():
        dry = _dry_make(team, target)
        assert command in dry, (target, dry)
        assert "pip install" not in dry, target
    assert "stack_checks --dir . --verbose" in _dry_make(team, "test", "VERBOSE=1")


def _team_with_this_venv(copy: Path, tmp_path: Path) -> Path:
    """A copy whose .venv is this session's Python, its stamp matching the pin: make runs."""
    team = tmp_path / "team"
    shutil.copytree(copy, team)
    (team / ".venv" / "bin").mkdir(parents=True)
    # A wrapper, not a symlink: Python finds its virtualenv from where it was started.
    python = team / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n', encoding="utf-8")
    python.chmod(0o755)
    shutil.copy(team / "requirements-machinery.txt", team / ".venv" / ".machinery")
    for name in ("requirements-machinery.txt", "requirements-dev.txt"):
        os.utime(team / name, (1, 1))
    return team


def test_a_lint_failure_names_make_fix_which_fixes_it(copy: Path, tmp_path: Path) -> None:
    team = _team_with_this_venv(copy, tmp_path)
    (team / "tests" / "test_more_jobs.py").write_text("import os,sys\nx=1\n", encoding="utf-8")
    failed = make(team, "lint", 120)
    assert failed.returncode != 0
    assert "lint failed: make fix applies ruff's fixes and formatting" in failed.stderr
    fixed = make(team, "fix", 120)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert (team / "tests" / "test_more_jobs.py").read_text() == "x = 1\n"
    assert make(team, "lint", 120).returncode == 0


def test_a_copys_test_output_is_its_own_results_only(copy: Path, tmp_path: Path) -> None:
    team = _team_with_this_venv(copy, tmp_path)
    # A job test on the emulator's store imports the Google client libraries, whose
    # api_core warns at import about Python 3.11's end of life.
    (team / "tests" / "test_jobs_store.py").write_text(
        "from google.cloud import firestore\n\n\n"
        "def test_the_client_library_is_there():\n    assert firestore.Client\n",
        encoding="utf-8",
    )
    done = make(team, "test-jobs", 300)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = (done.stdout + done.stderr).splitlines()
    assert shown[0].startswith("PYTHONPATH=handler ")  # make's echo of the command
    assert any(" passed in " in line for line in shown), shown
    assert not [line for line in shown[1:] if "warning" in line.lower()], shown


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"name_prefix": "A"}, "name_prefix must be 2-22 lowercase letters"),
        ({"name_prefix": "x" * 23}, "name_prefix must be 2-22 lowercase letters"),
        ({"gcp_project": "Acme"}, "gcp_project must be a Google Cloud project id"),
        ({"gcp_region": "europe"}, "gcp_region must be a Google Cloud region"),
        ({"stack": "my stack"}, "stack must be a Pulumi stack name"),
    ],
)
def test_a_bad_answer_is_refused_with_its_rule_and_writes_nothing(
    source: Path, tmp_path: Path, answer: dict[str, str], message: str
) -> None:
    target = tmp_path / "copy"
    made = copier(source, "copy", "--vcs-ref", "HEAD", str(source), str(target), **ANSWERS | answer)
    assert made.returncode != 0
    assert message in made.stderr
    assert not target.exists()


def test_the_questions_apply_the_programs_own_rules() -> None:
    questions = yaml.safe_load((REPO_ROOT / "copier.yml").read_text())
    for question, rule in (
        ("gcp_project", PROJECT_ID),
        ("gcp_region", REGION),
        ("name_prefix", _PREFIX),
    ):
        assert f"regex_search('^{rule.pattern}$')" in questions[question]["validator"], question


TEAM_STACK = """config:
  gcp:project: acme-sched-dev
  gcp:region: europe-west1
  scheduler-dedup:namePrefix: acme
  scheduler-dedup:jobs:
    - id: nightly-close
      schedule: "15 1 * * *"
      timeZone: Europe/Paris
      attemptDeadline: 300s
      retry:
        retryCount: 2
    # Three attempts of 300 s and their backoffs outlast the 15-minute interval.
    - id: quarter-hourly
      schedule: "*/15 * * * *"
      attemptDeadline: 300s
      retry:
        retryCount: 2
"""
TEAM_JOBS = '''"""Acme's jobs."""

from __future__ import annotations

import logging

from runledger import Jobs, RunContext

JOBS = Jobs()
log = logging.getLogger(__name__)


@JOBS.job("nightly-close")
def nightly_close(ctx: RunContext) -> None:
    log.info("closing the day before %s", ctx.schedule_time)


@JOBS.job("quarter-hourly")
def quarter_hourly(ctx: RunContext) -> None:
    log.info("syncing up to %s", ctx.schedule_time)
'''
TEAM_TEST = '''"""Acme's job tests."""

from __future__ import annotations

from jobs import JOBS

from runledger.testing import JobHarness


def test_quarter_hourly_runs_once_when_delivered_twice():
    harness = JobHarness(JOBS)
    assert harness.deliver("quarter-hourly").outcome == "completed"
    assert harness.deliver("quarter-hourly").ran is False
    assert harness.executions("quarter-hourly") == 1
'''
TEAM_FILES = {
    "Pulumi.dev.yaml": TEAM_STACK,
    "handler/jobs.py": TEAM_JOBS,
    "tests/test_jobs.py": TEAM_TEST,
}


# The template version the copies of today were made from: the tip of main before the
# README became the team's own file. No release is tagged yet (and a clone carries no
# tags), so the previous version is named by its commit; move it to each new release.
# From it, `copier update` must leave no conflict in any file the team did not edit.
PREVIOUS_RELEASE = "8b70702475424f50bf2d78882ea1ac0bcca9d8e0"
CONFLICT_MARKERS = (b"<<<<<<<", b">>>>>>>")


def conflicts(directory: Path) -> list[str]:
    """Every `.rej` file and every file holding a conflict marker line, outside .git/.venv."""
    found = []
    for path in directory.rglob("*"):
        parts = path.relative_to(directory).parts
        if not path.is_file() or parts[0] in (".git", ".venv"):
            continue
        lines = path.read_bytes().splitlines()
        if path.suffix == ".rej" or any(line.startswith(CONFLICT_MARKERS) for line in lines):
            found.append(str(path.relative_to(directory)))
    return sorted(found)


def make(copy: Path, target: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", target],
        cwd=copy,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


@pytest.mark.timeout(3600)
@pytest.mark.full_copy
def test_a_copy_from_the_previous_version_is_green_before_and_after_copier_update(
    source: Path, tmp_path: Path
) -> None:
    base = PREVIOUS_RELEASE
    head = _git(source, "rev-parse", "HEAD")
    copy = tmp_path / "acme-schedules"
    made = copier(source, "copy", "--vcs-ref", base, str(source), str(copy), **ANSWERS)
    assert made.returncode == 0, made.stderr
    for name, text in TEAM_FILES.items():
        (copy / name).write_text(text, encoding="utf-8")
    _git(copy, "init", "-q")
    _git(copy, "add", "-A")
    _git(copy, "commit", "-q", "-m", "Acme's schedules")

    # The first make builds .venv and installs the machinery from the pin (minutes).
    before = make(copy, "test", 1500)
    assert before.returncode == 0, before.stdout[-6000:] + before.stderr[-3000:]
    assert "capacity of stack dev: " in before.stdout and ": holds" in before.stdout
    assert "stack checks passed (1 stack(s)" in before.stdout

    readme = (copy / "README.md").read_bytes()
    # Copier's two ways of leaving a conflict: markers in the file (the default,
    # exit 0 all the same) or a .rej beside it. Neither may appear, in a twin of the
    # copy (the same commit, no .venv) for `rej`, in the copy itself for `inline`.
    twin = tmp_path / "twin" / copy.name
    shutil.copytree(copy, twin, ignore=shutil.ignore_patterns(".venv"))
    for directory, mode in ((twin, "rej"), (copy, "inline")):
        updated = copier(directory, "update", "--conflict", mode, "--vcs-ref", head)
        assert updated.returncode == 0, updated.stderr
        assert conflicts(directory) == [], mode
        for name, text in TEAM_FILES.items():
            assert (directory / name).read_text(encoding="utf-8") == text, (mode, name)
        assert (directory / "README.md").read_bytes() == readme, mode
        assert pin(directory).endswith(f"@{head}")

    after = make(copy, "test", 900)
    assert after.returncode == 0, after.stdout[-6000:] + after.stderr[-3000:]
    assert "--force-reinstall --no-deps -r requirements-machinery.txt" in after.stdout
    assert (copy / ".venv" / ".machinery").read_text() == (
        copy / "requirements-machinery.txt"
    ).read_text()
    installed = subprocess.run(
        [str(copy / ".venv" / "bin" / "python"), "-m", "pip", "show", "-f", "scheduler-dedup"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "runledger/__init__.py" in installed.stdout
    direct_url = next((copy / ".venv").glob("lib/python*/site-packages/scheduler_dedup-*"))
    assert head in (direct_url / "direct_url.json").read_text()

    # Once installed, a green `make test` fits a screen: a summary per stack.
    again = make(copy, "test", 600)
    assert again.returncode == 0, again.stdout[-6000:] + again.stderr[-3000:]
    shown = (again.stdout + again.stderr).splitlines()
    assert len(shown) <= 40, "\n".join(shown)
    assert "stack checks passed (1 stack(s)" in again.stdout
