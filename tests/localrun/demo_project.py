"""The demo tests' own Pulumi project and stack, so they never depend on the repo's stack files.

A team deletes Pulumi.example.yaml and adds its own stacks; the simulator and
the demo are tested against this fixed one (the template's example jobs:
three time zones, retries from none to five, deadlines from 2 to 15 minutes).
"""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from dedup_schedule.config.model import ScheduleConfig
from scheduler_dedup.localrun.demo import DemoOptions
from scheduler_dedup.localrun.demo_stack import load_stack

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_PROJECT = Path(__file__).resolve().parent / "stack"
DEMO_STACK = "demo"
# The command-line form: `python -m scheduler_dedup.localrun.demo *DEMO_ARGS`.
DEMO_ARGS = ("--dir", str(DEMO_PROJECT), "--stack", DEMO_STACK, "--demo-jobs")


def demo_stack() -> ScheduleConfig:
    return load_stack(DEMO_STACK, DEMO_PROJECT)


# `run_demo`'s options for the demo stack and the built-in work (`DEMO_OPTIONS(runs=3)`).
DEMO_OPTIONS = partial(DemoOptions, project_dir=DEMO_PROJECT, demo_jobs=True)


# The instant the seeded demo tests start at (`run_demo(now=...)`), so what they
# replay does not depend on the hour they run. At this one the demo's overlap skip
# lands on an hourly run the tests count (2026-12-02 02:10 UTC).
DEMO_NOW = datetime(2026, 12, 2, 2, 10, tzinfo=UTC)


# A team's project as a copy of the template holds it: its own Pulumi.yaml and stack, the
# handler's entry point, and its own jobs.py (one job that raises on every attempt).
TEAM_STACK = "team"
TEAM_STACK_FILE = """config:
  gcp:project: acme-team-prod
  gcp:region: europe-west1
  scheduler-dedup:jobs:
    - id: ledger-close
      schedule: "15 * * * *"
      timeZone: Europe/Paris
      attemptDeadline: 300s
      retry:
        retryCount: 2
    - id: price-sync
      schedule: "*/30 * * * *"
      timeZone: UTC
      attemptDeadline: 120s
"""
TEAM_JOBS = '''"""The team's jobs: the ledger is locked, so ledger-close fails on every attempt."""

import logging

from runledger import Jobs, RunContext

JOBS = Jobs()
log = logging.getLogger(__name__)


@JOBS.job("ledger-close")
def ledger_close(ctx: RunContext) -> None:
    raise LookupError(f"no ledger period open for {ctx.schedule_time:%Y-%m}")


@JOBS.job("price-sync")
def price_sync(ctx: RunContext) -> None:
    log.info("prices synced up to %s", ctx.schedule_time.isoformat())
'''
TEAM_FAILURE = "LookupError: no ledger period open for "


def team_project(directory: Path, jobs: str = TEAM_JOBS, stack: str = TEAM_STACK_FILE) -> Path:
    """A team's project in `directory`: Pulumi.yaml, Pulumi.team.yaml and handler/ with `jobs`."""
    project = directory / "team-schedule"
    handler = project / "handler"
    handler.mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "Pulumi.yaml", project / "Pulumi.yaml")
    (project / f"Pulumi.{TEAM_STACK}.yaml").write_text(stack, encoding="utf-8")
    for name in ("main.py", "requirements.txt"):
        shutil.copy2(REPO_ROOT / "handler" / name, handler / name)
    (handler / "jobs.py").write_text(jobs, encoding="utf-8")
    return project


_RUN_LINE = re.compile(
    r"^\s+\[\s*\d+/\d+\] (?P<job>\S+)\s+(?P<when>\d{4}-\d\d-\d\d \d\d:\d\d)Z (?P<kind>\S+)\s.*"
    r"=> .*; work succeeded (?P<successes>\d+)x \((?P<fate>\w+)\)$"
)


def run_lines_disagreeing_with_the_report(text: str, report: dict) -> list[str]:
    """The per-run lines the demo printed that contradict the JSON report's fate or count.

    Also a run the report has and no line shows, or two lines for one run.
    """
    runs = {
        (run["job"], run["schedule_time"][:16].replace("T", " "), run["manual"]): run
        for run in report["runs"]
    }
    shown: dict[tuple[str, str, bool], str] = {}
    problems = []
    for line in text.splitlines():
        match = _RUN_LINE.match(line)
        if match is None:
            continue
        key = (match["job"], match["when"], match["kind"] == "forced")
        run = runs.get(key)
        if key in shown or run is None:
            problems.append(f"{line.strip()}: {'twice' if key in shown else 'no such run'}")
        elif (int(match["successes"]), match["fate"]) != (
            run["successful_executions"],
            run["fate"],
        ):
            problems.append(
                f"{line.strip()}: the report says {run['fate']}, "
                f"{run['successful_executions']} successful execution(s)"
            )
        shown[key] = line
    problems += [f"{run['run']}: no line" for key, run in runs.items() if key not in shown]
    return problems
