"""The files the simulator and the demo jobs share: what each run's work does, what it did.

The simulator decides from its seed how long each execution of a run takes and
whether it fails; the demo jobs module, running inside the handler process,
reads that plan and appends one line per execution start and end to a log. The
invariant is checked against that log, never against the handler's own answers
or its ledger, so a handler that acknowledged a run without doing the work (or
did it twice) cannot hide it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

PLAN_ENV = "DEMO_PLAN_PATH"
EVENTS_ENV = "DEMO_EXECUTIONS_PATH"
# A file the demo creates once the Scheduler is done: the downstream outage is over.
OUTAGE_OVER_ENV = "DEMO_OUTAGE_OVER_PATH"
# A file the demo creates once the run that meets a running run of its job was answered
# (`scheduler_dedup.localrun.demo_overlap`): the holding run's work may end.
OVERLAP_ANSWERED_ENV = "DEMO_OVERLAP_ANSWERED_PATH"
# The team's jobs module whose functions the demo work calls (unset: demonstration work only).
OWN_JOBS_ENV = "DEMO_OWN_JOBS_MODULE"
# An execution's end when the team's own job function raised (terminally or not), apart
# from the failures the simulator injects before calling it (failed_retryable).
JOB_RAISED = "job_raised"
# A job outside the stack whose single no-op delivery opens the handler's Firestore
# connection (its cold start) before the timed runs begin; it is never logged.
WARMUP_JOB = "localrun-demo-warmup"


class DemoRetryableError(RuntimeError):
    """The failure the demo injects (a flaky downstream): the handler releases the run.

    Raised by the demo jobs before the team's function is called; the report tells
    it apart from the team's own exceptions by its name in the handler's log.
    """


def run_label(job: str, schedule_time: datetime, manual: bool) -> str:
    """One run's name, the same however the ScheduleTime header spelled the instant."""
    instant = schedule_time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{job}@{instant}{'/manual' if manual else ''}"


@dataclass(frozen=True)
class Step:
    """What one execution of a run's work does: take `seconds`, then succeed or fail.

    A failing step fails only while the downstream is out, that is until the
    demo creates the OUTAGE_OVER_ENV file after the Scheduler's last attempt:
    a run whose retries ran out then succeeds when the audit catches it up.
    A holding step ends early, once the demo creates the OVERLAP_ANSWERED_ENV file:
    it holds its job's overlap slot until the next run of the job was answered.
    """

    seconds: float
    fails: bool = False
    holds: bool = False


@dataclass(frozen=True)
class WorkPlan:
    """Per-run scripts: execution n of a run follows script[n], the last entry repeats."""

    jobs: tuple[str, ...]
    scripts: Mapping[str, tuple[Step, ...]]
    default: Step

    def step(self, label: str, execution_index: int) -> Step:
        script = self.scripts.get(label)
        if not script:
            return self.default
        return script[min(execution_index, len(script) - 1)]


def write_plan(path: Path, plan: WorkPlan) -> None:
    document = {
        "jobs": list(plan.jobs),
        "default": [plan.default.seconds, plan.default.fails],
        "scripts": {
            label: [[step.seconds, step.fails, step.holds] for step in script]
            for label, script in plan.scripts.items()
        },
    }
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")


def read_plan(path: Path) -> WorkPlan:
    document = json.loads(path.read_text(encoding="utf-8"))
    return WorkPlan(
        jobs=tuple(document["jobs"]),
        scripts={
            label: tuple(Step(float(s), bool(f), bool(h)) for s, f, h in script)
            for label, script in document["scripts"].items()
        },
        default=Step(float(document["default"][0]), bool(document["default"][1])),
    )


@dataclass(frozen=True)
class ExecutionEvent:
    """One line of the execution log: an execution of `label` started or ended."""

    label: str
    attempt_id: str
    event: str  # "start" or "end"
    outcome: str | None  # on "end": succeeded, failed_retryable, JOB_RAISED or lease_lost
    at: float  # time.time() in the handler process

    def to_line(self) -> bytes:
        data = {
            "label": self.label,
            "attempt_id": self.attempt_id,
            "event": self.event,
            "outcome": self.outcome,
            "at": self.at,
        }
        return (json.dumps(data, separators=(",", ":")) + "\n").encode()


def append_event(path: Path, event: ExecutionEvent) -> None:
    """Append one line with a single O_APPEND write, so concurrent executions never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, event.to_line())
    finally:
        os.close(fd)


def read_events(path: Path) -> list[ExecutionEvent]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            data = json.loads(line)
            events.append(
                ExecutionEvent(
                    data["label"], data["attempt_id"], data["event"], data["outcome"], data["at"]
                )
            )
    return events


def count_starts(events: Sequence[ExecutionEvent], label: str) -> int:
    return sum(1 for event in events if event.label == label and event.event == "start")
