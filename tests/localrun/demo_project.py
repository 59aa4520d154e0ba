"""The demo tests' own Pulumi project and stack, so they never depend on the repo's stack files.

A team deletes Pulumi.example.yaml and adds its own stacks; the simulator and
the demo are tested against this fixed one (the template's example jobs:
three time zones, retries from none to five, deadlines from 2 to 15 minutes).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from dedup_schedule.config.model import ScheduleConfig
from scheduler_dedup.localrun.demo_stack import load_stack

DEMO_PROJECT = Path(__file__).resolve().parent / "stack"
DEMO_STACK = "demo"
# The command-line form: `python -m scheduler_dedup.localrun.demo *DEMO_ARGS`.
DEMO_ARGS = ("--dir", str(DEMO_PROJECT), "--stack", DEMO_STACK, "--demo-jobs")


def demo_stack() -> ScheduleConfig:
    return load_stack(DEMO_STACK, DEMO_PROJECT)


# The instant the seeded demo tests start at (`run_demo(now=...)`), so what they
# replay does not depend on the hour they run. At this one the demo's overlap skip
# lands on an hourly run the tests count (2026-12-02 02:10 UTC).
DEMO_NOW = datetime(2026, 12, 2, 2, 10, tzinfo=UTC)
