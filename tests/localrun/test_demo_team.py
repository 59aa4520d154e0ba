"""`make demo` in a team's project, as a copy of the template holds one: its own stack and jobs.py.

A job that raises on every attempt is the team's failure, shown with its exception and
never called an exactly-once violation; a jobs.py that cannot be imported stops the demo
with exit 2 and the one line `make plan` prints; the team's overlap policies stand.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from runledger.facts import JOB_HEADER, SCHEDULE_HEADER
from scheduler_dedup.localrun.demo import DemoOptions, run_demo
from scheduler_dedup.localrun.demo_invariant import (
    FATE_DROPPED,
    FATE_EXHAUSTED,
    FATE_JOB_FAILED,
    FATE_RAN_ONCE,
)
from scheduler_dedup.localrun.demo_keep import STATE_DIR_ENV, stop
from scheduler_dedup.localrun.demo_plan import WARMUP_JOB
from scheduler_dedup.localrun.demo_stack import load_stack
from scheduler_dedup.localrun.emulator import FirestoreEmulator
from tests.clitools import run_module
from tests.localrun.demo_project import (
    DEMO_NOW,
    REPO_ROOT,
    TEAM_FAILURE,
    TEAM_STACK,
    TEAM_STACK_FILE,
    run_lines_disagreeing_with_the_report,
    team_project,
)

FAILING_JOB = "ledger-close"


def _team_demo(emulator: FirestoreEmulator, project: Path, runs: int, catch_up: bool = False):
    """The demo of the team's project at DEMO_NOW, on an empty ledger: invariant, report, text."""
    config = load_stack(TEAM_STACK, project)
    emulator.clear(config.database.name, project=config.project)
    out = io.StringIO()
    options = DemoOptions(runs=runs, project_dir=project, catch_up=catch_up)
    invariant, report = run_demo(options, config, out, emulator, now=DEMO_NOW)
    return invariant, report, out.getvalue()


REQUIREMENTS_ADVICE = "so install the handler's requirements there too"


@pytest.mark.parametrize(
    ("jobs", "expected", "advice"),
    [
        (
            "import acme_ledger_client\n",
            "handler/jobs.py:1: ModuleNotFoundError: No module named 'acme_ledger_client'",
            True,
        ),
        (
            '"""Acme\'s jobs."""\n\nJOBS = {}\n\n\ndef close(ctx)\n    pass\n',
            "handler/jobs.py:6: SyntaxError: expected ':'",
            False,
        ),
        (
            "JOBS = {}\nLIMIT = int('ten')\n",
            "handler/jobs.py:2: ValueError: invalid literal",
            False,
        ),
    ],
    ids=["missing-import", "syntax-error", "raises"],
)
def test_a_jobs_py_that_cannot_be_imported_stops_the_demo_with_make_plans_line(
    tmp_path: Path, jobs: str, expected: str, advice: bool
) -> None:
    project = team_project(tmp_path, jobs=jobs)
    shutil.copytree(REPO_ROOT / "infra", project / "infra")  # the program `make plan` runs
    demo = run_module("scheduler_dedup.localrun.demo", "--dir", str(project), timeout_s=300)
    plan = run_module("scheduler_dedup.offline.plan", "--dir", str(project), timeout_s=300)
    assert demo.returncode == plan.returncode == 2, demo.stdout + demo.stderr
    (line,) = demo.stderr.strip().splitlines()
    assert line == plan.stderr.strip(), (line, plan.stderr)
    assert line.startswith(f"error: scheduler-dedup:handlerDir: {expected}"), line
    assert (REQUIREMENTS_ADVICE in line) is advice, line
    assert "Traceback" not in demo.stdout + demo.stderr
    assert "starting" not in demo.stdout  # nothing was started


@pytest.mark.firestore
@pytest.mark.timeout(600)
def test_a_job_that_raises_on_every_attempt_is_shown_with_its_exception_not_as_a_violation(
    firestore_emulator, tmp_path: Path
) -> None:
    invariant, report, text = _team_demo(firestore_emulator, team_project(tmp_path), runs=3)
    assert invariant.holds, text
    assert run_lines_disagreeing_with_the_report(text, report) == [], text
    assert "work: your jobs from handler/jobs.py" in text
    assert "VIOLATED" not in text + report["verdict"]
    runs = report["runs"]
    fates = Counter(run["fate"] for run in runs if run["job"] == FAILING_JOB)
    # The job's code never succeeds; its runs end failed by it, or as the demo made them end.
    assert fates[FATE_JOB_FAILED] >= 1 and set(fates) <= {
        FATE_JOB_FAILED,
        FATE_EXHAUSTED,
        FATE_DROPPED,
    }, fates
    for run in runs:
        if run["fate"] == FATE_JOB_FAILED:
            assert run["error"].startswith(TEAM_FAILURE), run
            assert run["successful_executions"] == 0 and run["failed_executions"] >= 1, run
            assert "your job failed on every attempt (a failure of your job, not of " in text
            assert f"{run['run']} raised {run['error']}" in text
        if run["job"] != FAILING_JOB:
            assert run["fate"] in (FATE_RAN_ONCE, FATE_DROPPED), run
    assert set(report["invariant"]["job_failed"]) >= {
        run["run"] for run in runs if run["fate"] == FATE_JOB_FAILED
    }
    assert report["audit"]["accounts_for_every_run"], text
    assert f"your job failed on every attempt in {fates[FATE_JOB_FAILED]}" in report["verdict"]
    assert report["verdict"].startswith("verdict: exactly once HOLDS")
    # The team's own log lines, without the demo's warm-up or the handler's request lines.
    logs = text.split("your jobs' log lines, each with its run", 1)[1]
    assert "prices synced up to" in logs
    assert WARMUP_JOB not in logs and "run completed" not in logs
    # The team's stack gives no job `overlap: skip`: the demo sets none, so none is skipped.
    assert 'overlap: no run is skipped (no job that can show it has "overlap: skip"' in text
    assert report["invariant"]["skipped"] == []
    assert not any("overlap" in note for note in report["settings"]["handler_notes"])


@pytest.mark.firestore
@pytest.mark.timeout(600)
def test_a_catch_up_that_runs_the_failing_job_again_is_its_failure_too(
    firestore_emulator, tmp_path: Path
) -> None:
    invariant, report, text = _team_demo(
        firestore_emulator, team_project(tmp_path), runs=3, catch_up=True
    )
    assert invariant.holds, text
    assert run_lines_disagreeing_with_the_report(text, report) == [], text
    assert "VIOLATED" not in text + report["verdict"]
    assert report["audit"]["accounts_for_every_run"], text
    caught = {item["run"]: item["catch_up"] for item in report["audit"]["findings"]}
    failed = [run for run in caught if run.startswith(f"{FAILING_JOB}@")]
    assert failed and all(caught[run] != "completed" for run in failed), caught
    assert set(failed) <= set(report["invariant"]["job_failed"]), report["invariant"]


# The kept demo runs in its own process, pinned to DEMO_NOW, so that what it leaves running
# is no child of this one (`make demo-stop` then finds it gone once stopped).
_KEPT_DEMO = """
import io, json, sys
from pathlib import Path
from scheduler_dedup.localrun.demo import DemoOptions, run_demo
from scheduler_dedup.localrun.demo_stack import load_stack
from scheduler_dedup.localrun.emulator import FirestoreEmulator
from tests.localrun.demo_project import DEMO_NOW, TEAM_STACK
project, report = Path(sys.argv[1]), Path(sys.argv[2])
options = DemoOptions(stack=TEAM_STACK, runs=3, project_dir=project, keep=True)
out = io.StringIO()
_, data = run_demo(options, load_stack(TEAM_STACK, project), out, now=DEMO_NOW)
report.write_text(json.dumps(data))
print(out.getvalue())
"""


@pytest.mark.firestore
@pytest.mark.timeout(600)
def test_the_kept_demos_curl_delivers_again_a_run_that_completed(
    firestore_emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (firestore_emulator only makes the test skip loudly where there is no emulator.)
    # The stack's first job fails every run: the hint must pick another job's completed run.
    kept = tmp_path / "kept"
    monkeypatch.setenv(STATE_DIR_ENV, str(kept))
    project = team_project(tmp_path)
    assert load_stack(TEAM_STACK, project).jobs[0].id == FAILING_JOB
    report_path = tmp_path / "report.json"
    try:
        demo = subprocess.run(
            [sys.executable, "-c", _KEPT_DEMO, str(project), str(report_path)],
            cwd=REPO_ROOT,
            env={**os.environ, STATE_DIR_ENV: str(kept)},
            capture_output=True,
            text=True,
            timeout=480,
            check=False,
        )
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
        lines = [line.strip() for line in demo.stdout.splitlines()]
        (curl,) = [line for line in lines if line.startswith("curl ")]
        command = shlex.split(curl)
        headers = dict(command[i + 1].split(": ", 1) for i, v in enumerate(command) if v == "-H")
        run = f"{headers[JOB_HEADER]}@{headers[SCHEDULE_HEADER]}"
        fates = {r["run"]: r["fate"] for r in json.loads(report_path.read_text())["runs"]}
        assert fates[run] == FATE_RAN_ONCE, (curl, fates)
        again = subprocess.run(
            [*command, "--silent", "--max-time", "120"],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert " 200 " in again.stdout.splitlines()[0], again.stdout + again.stderr
        assert '"duplicate_completed"' in again.stdout, again.stdout
    finally:
        assert stop(io.StringIO()) == 0


# The same two jobs, one with `overlap: delay`, one with `overlap: skip`.
OVERLAP_STACK = TEAM_STACK_FILE.replace(
    "attemptDeadline: 300s\n", "attemptDeadline: 300s\n      overlap: delay\n"
).replace("attemptDeadline: 120s\n", "attemptDeadline: 120s\n      overlap: skip\n")
SUCCEEDING_JOBS = """from runledger import Jobs

JOBS = Jobs()
JOBS.job("ledger-close")(lambda ctx: None)
JOBS.job("price-sync")(lambda ctx: None)
"""


@pytest.mark.firestore
@pytest.mark.timeout(600)
def test_the_demo_skips_only_where_the_team_said_skip_and_keeps_each_jobs_policy(
    firestore_emulator, tmp_path: Path
) -> None:
    project = team_project(tmp_path, jobs=SUCCEEDING_JOBS, stack=OVERLAP_STACK)
    invariant, report, text = _team_demo(firestore_emulator, project, runs=4)
    assert invariant.holds, text
    assert 'overlap: price-sync has "overlap: skip" in the stack; ' in text
    # Exactly the one planned skip, of the job whose stack says skip; the delay job's runs,
    # sent one after another, never met a run of their own job still working.
    (skipped,) = invariant.skipped
    assert skipped.startswith("price-sync@"), text
    outcomes = {d["outcome"] for run in report["runs"] for d in run["deliveries"]}
    assert "overlap_delayed" not in outcomes, text
    assert not any("overlap" in note for note in report["settings"]["handler_notes"])
