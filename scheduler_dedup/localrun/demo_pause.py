"""The demo's paused job: an operator pauses one job in the middle of the replay.

From its pause on, Scheduler sends the job nothing (PauseJob: "the system will
stop executing the job until it is re-enabled", Cloud Scheduler REST reference),
and its DEDUP_SCHEDULES entry carries `"paused": true`, as the stack writes it
for a job whose config says `paused: true`. The emulator run cannot ask Cloud
Scheduler since when, so the audit leaves the job's whole window unjudged. What
the demo shows and checks: the paused job neither pages (no finding) nor runs
(no execution after the pause, with --catch-up too), and the audit's summary
lists it as paused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduler_dedup.localrun.demo_plan import ExecutionEvent
from scheduler_dedup.localrun.simulator import AUDITED_FAULTS, RunPlan


@dataclass(frozen=True)
class Pause:
    job: str
    since: datetime  # the first scheduled time Scheduler does not send

    def covers(self, plan: RunPlan) -> bool:
        """Whether Scheduler, the job paused, never sends this run (forced ones included)."""
        return plan.job == self.job and plan.schedule_time >= self.since


def pause_midway(plans: Sequence[RunPlan]) -> Pause | None:
    """Pause one job from its middle scheduled run on (or later), without hiding a fault.

    The audit leaves a paused job's window unjudged, so the job must have no run
    the audit is meant to find (dropped, exhausted); and every misbehaviour its
    held runs would have shown must still happen on another run.
    """
    for job in sorted({plan.job for plan in plans}, reverse=True):
        mine = [plan for plan in plans if plan.job == job]
        times = sorted(plan.schedule_time for plan in mine if not plan.manual)
        if len(times) < 2 or any(plan.fault in AUDITED_FAULTS for plan in mine):
            continue
        for since in times[len(times) // 2 :]:  # from the middle on, the earliest that fits
            pause = Pause(job, since)
            shown = {plan.fault for plan in plans if not pause.covers(plan)}
            if all(plan.fault in shown for plan in plans if pause.covers(plan)):
                return pause
    return None


def paused_schedules(raw: str, pause: Pause) -> str:
    """DEDUP_SCHEDULES with the paused job's entry saying so."""
    entries = json.loads(raw)
    for entry in entries:
        if entry["id"] == pause.job:
            entry["paused"] = True
    return json.dumps(entries, separators=(",", ":"))


def pause_problems(
    pause: Pause,
    held: Iterable[RunPlan],
    events: Iterable[ExecutionEvent],
    summary: Mapping[str, Any] | None,
    findings: Iterable[Any],
) -> list[str]:
    """Where the paused job paged, ran, or went unlisted."""
    problems = []
    held_labels = {plan.label for plan in held}
    ran = sorted({event.label for event in events if event.label in held_labels})
    problems += [f"{label}: paused, but it ran" for label in ran]
    problems += [
        f"{pause.job}: paused, but the audit reported {item.finding.value}"
        for item in findings
        if item.job == pause.job
    ]
    listed = [entry["job"] for entry in (summary or {}).get("paused_jobs", [])]
    if pause.job not in listed:
        problems.append(f"{pause.job}: paused, but the audit's summary does not list it")
    return problems
