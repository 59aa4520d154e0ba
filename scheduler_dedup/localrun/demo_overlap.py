"""The demo's overlapping run and its backfill: `overlap: skip` and `ops backfill`, once each.

Overlap: one job runs with `overlap: skip` (its DEDUP_SCHEDULES entry written by
the one builder, as the stack writes it for a job whose config says so): with the
team's own jobs, only a job whose stack says so, for the demo never changes a
job's policy behind the team's back; with the built-in demonstration work, any
job, and the demo says which (`choose_overlap`). One of
its runs, the holder, is still working when Cloud Scheduler delivers the job's
next scheduled time, as a run that outlasts its job's interval would be. The
simulator sends that next time once the execution log shows the holder started,
and the holder's work ends once that delivery was answered (at the latest after
HOLD_SHARE of its attempt deadline, so Scheduler never times it out). The
handler must answer it `overlap_skipped`, record it `skipped` and never run it:
the invariant counts it deliberately not run, and the audit, which judges it,
must not report it and must count it in its summary's `skipped`. The job's other
runs, and those of every job the stack gives a policy other than allow, are released
one after another, each once the one before has ended (`Gate`): in compressed time
consecutive runs would overlap where the deployed schedule keeps them an interval
apart, and each would be skipped (or delayed) too.

Backfill: before delivering the audit, the demo does what an operator's
`python -m runledger.ops backfill --job J --from T --to T+1s` does, through the
CLI's own entry point, for a past fire time the simulator never delivered and the
audit's look-back does not reach (so it is no finding). The audit job then runs
it once, with trigger `backfill`: the execution log must show exactly one
success, and the summary's `backfill` must count it.
"""

from __future__ import annotations

import io
import itertools
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scheduler_dedup.localrun.demo_invariant import Invariant
from scheduler_dedup.localrun.demo_plan import Step, read_events, run_label
from scheduler_dedup.localrun.simulator import (
    AUDIT_MARGIN,
    Fault,
    RunPlan,
    SimJob,
    fire_times,
    replayed_since,
)

if TYPE_CHECKING:
    from scheduler_dedup.localrun.emulator import FirestoreEmulator

# The holder works at most this share of its (compressed) attempt deadline.
HOLD_SHARE = 0.8
# How long a gated run waits for the run before it (a generous bound on a loaded machine).
GATE_TIMEOUT_S = 60.0
_POLL_S = 0.02
# Faults the pair's runs may carry: they still show with the holder's work replaced
# (copies and a lost answer are more deliveries of the same run), so no fault goes unshown.
_KEPT = frozenset({None, Fault.BURST, Fault.LOST_ACK})


@dataclass(frozen=True)
class Overlap:
    job: str
    holder: RunPlan  # still running when `skipped` is delivered
    skipped: RunPlan  # the job's next scheduled time: skipped, never run


def choose_overlap(
    plans: Sequence[RunPlan],
    jobs: Sequence[SimJob],
    now: datetime,
    runs: int,
    paused: str | None,
    allowed: Collection[str],
) -> Overlap | None:
    """Two consecutive scheduled runs of one job among `allowed`, the second judged by the audit.

    `allowed`: the jobs that may run with `overlap: skip`, which the demo never sets
    behind the team's back: with the team's jobs, those whose stack says skip;
    with the built-in demonstration work, any (and the demo says which).
    Neither may carry a fault that depends on its work (a timeout, a failure) or
    leaves it without a delivery or success (dropped, exhausted).
    The second lies inside the audit's window (as a dropped run does), so the audit
    counts the skip. Among the jobs that have such a pair, the one with the longest
    attempt deadline holds longest.
    """
    audited_from = replayed_since(jobs, now, runs) + AUDIT_MARGIN
    for job in sorted(jobs, key=lambda j: -j.attempt_deadline_s):
        if job.id == paused or job.id not in allowed:
            continue
        mine = [plan for plan in plans if plan.job == job.id and not plan.manual]
        for holder, skipped in itertools.pairwise(mine):
            fits = holder.fault in _KEPT and skipped.fault in _KEPT
            if fits and skipped.schedule_time > audited_from:
                return Overlap(job.id, holder, skipped)
    return None


def with_overlap(plans: Sequence[RunPlan], overlap: Overlap, job: SimJob) -> list[RunPlan]:
    """The plans with the holder's work holding its job until the skipped run was answered."""
    hold = Step(round(job.attempt_deadline_s * HOLD_SHARE, 3), holds=True)
    return [
        replace(plan, script=(hold,)) if plan.label == overlap.holder.label else plan
        for plan in plans
    ]


class Gate:
    """When each run of a serial job may be sent: after the one before it has ended.

    Serial are the jobs whose stack gives them an overlap policy other than allow
    (`serial`) and the overlap's job: in compressed time their consecutive runs
    would overlap where the deployed schedule keeps them an interval apart. The
    overlap's skipped run waits instead for the holder's execution to start; the
    run after it, for both. Once the skipped run was answered, `answered` is
    created and the holder's work ends.
    """

    def __init__(
        self,
        overlap: Overlap | None,
        plans: Sequence[RunPlan],
        events: Path,
        answered: Path | None,
        serial: Collection[str] = (),
    ):
        self._overlap = overlap
        jobs = {*serial, *(() if overlap is None else (overlap.job,))}
        self._order = {job: [plan.label for plan in plans if plan.job == job] for job in jobs}
        self._done = {label: threading.Event() for order in self._order.values() for label in order}
        self._events = events
        self._answered = answered

    def before(self, plan: RunPlan, stop: threading.Event) -> None:
        if plan.label not in self._done:
            return
        order = self._order[plan.job]
        earlier = order[: order.index(plan.label)]
        deadline = time.monotonic() + GATE_TIMEOUT_S
        if self._overlap is not None and plan.label == self._overlap.skipped.label:
            holder = self._overlap.holder.label
            earlier = [label for label in earlier if label != holder]
            while time.monotonic() < deadline and not stop.is_set():
                if any(e.label == holder and e.event == "start" for e in read_events(self._events)):
                    break
                stop.wait(_POLL_S)
        for label in earlier:
            self._done[label].wait(max(deadline - time.monotonic(), 0.0))

    def after(self, plan: RunPlan) -> None:
        overlap = self._overlap
        if overlap is not None and self._answered and plan.label == overlap.skipped.label:
            self._answered.touch()
        if plan.label in self._done:
            self._done[plan.label].set()


def overlap_problems(
    overlap: Overlap, invariant: Invariant, summary: Mapping[str, Any] | None
) -> list[str]:
    """Where the planned skip did not happen, another run was skipped, or the audit missed it."""
    problems = []
    skipped = set(invariant.skipped)
    if overlap.skipped.label not in skipped:
        problems.append(
            f"{overlap.skipped.label}: overlap: skip and {overlap.holder.label} was running, "
            "but it was not skipped"
        )
    problems += [
        f"{label}: skipped, but the demo planned no overlap for it"
        for label in sorted(skipped - {overlap.skipped.label})
    ]
    if summary is not None and summary.get("skipped") != len(skipped):
        problems.append(
            f"the audit's summary counts {summary.get('skipped')} skipped run(s), "
            f"the handler skipped {len(skipped)}"
        )
    return problems


@dataclass(frozen=True)
class Backfill:
    job: str
    schedule_time: datetime  # a past fire time the simulator never delivered

    @property
    def label(self) -> str:
        return run_label(self.job, self.schedule_time, manual=False)


def choose_backfill(
    plans: Sequence[RunPlan], jobs: Sequence[SimJob], now: datetime, runs: int, paused: str | None
) -> Backfill | None:
    """The latest fire time not replayed, of a job not paused: past, unjudged, retained.

    The demo's retention covers the replayed window (`demo_stack.handler_env`), so a
    time before the oldest replayed run and before `replayed_since` could be past it.
    A backfilled run, like a catch-up, reaches the job with the body its Scheduler
    job sends (DEDUP_SCHEDULES carries it: `App.catch_up`).
    """
    since = replayed_since(jobs, now, runs)
    oldest = min([plan.schedule_time for plan in plans] + [since])
    times = [
        Backfill(job.id, fire_times(job.schedule, job.time_zone, now, runs + 1)[0])
        for job in jobs
        if job.id != paused
    ]
    kept = [item for item in times if item.schedule_time >= oldest]
    return max(kept, key=lambda item: item.schedule_time, default=None)


def record_backfill(
    emulator: FirestoreEmulator, env: Mapping[str, str], backfill: Backfill, now: datetime
) -> tuple[int, str]:
    """`python -m runledger.ops backfill` for the one time, in process; its status and output."""
    from runledger.ops.cli import main

    start = backfill.schedule_time
    argv = [
        "backfill",
        "--job",
        backfill.job,
        "--from",
        _stamp(start),
        "--to",
        _stamp(start + timedelta(seconds=1)),
    ]
    out, err = io.StringIO(), io.StringIO()
    with emulator.as_process_env():  # the client takes the emulator's host when it is made
        code = main(argv, env={**emulator.env(), **env}, clock=lambda: now, stdout=out, stderr=err)
    return code, (out.getvalue() + err.getvalue()).strip()


def backfill_problems(
    backfill: Backfill, code: int, output: str, summary: Mapping[str, Any] | None
) -> list[str]:
    """Where the backfill was not recorded or the audit's pass did not run it."""
    if code != 0:
        return [f"{backfill.label}: ops backfill exited {code}: {output.splitlines()[-1:]}"]
    done = (summary or {}).get("backfill") or {}
    if done.get("ran") != 1:
        return [f"{backfill.label}: the audit's backfill pass ran {done.get('ran')} time(s), not 1"]
    return []


def backfill_command(backfill: Backfill) -> str:
    start = backfill.schedule_time
    return (
        f"python -m runledger.ops backfill --job {backfill.job} --from {_stamp(start)} "
        f"--to {_stamp(start + timedelta(seconds=1))}"
    )


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
