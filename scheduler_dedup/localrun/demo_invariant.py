"""The demo's promise, checked against the execution log rather than the handler's word.

Every run the Scheduler delivered must end with exactly one successful
execution of its work; executions of one run never overlap; failed
executions before the success are fine (that is what retries are for). The
only runs allowed to end without a success are those whose retries were
exhausted, those the Scheduler never delivered, those deliberately not
run: skipped by their job's overlap policy (answered `overlap_skipped` and never
executed, `scheduler_dedup.localrun.demo_overlap`), and those the team's own job
failed: its function raised on the last execution and the run ended unacknowledged
(a failure of the job, reported by the audit, not of exactly-once); they are listed,
not hidden. A run executed
more than once is a violation however it was started, by the Scheduler, by the
audit's catch-up or by a backfill; a backfilled time must succeed exactly once.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from runledger.facts import OUTCOME_OVERLAP_SKIPPED
from scheduler_dedup.localrun.demo_plan import JOB_RAISED, ExecutionEvent
from scheduler_dedup.localrun.simulator import Fault, RunResult

# Each run's fate in the report: its work succeeded once; or it is reported by the
# audit (never delivered, retries exhausted); or deliberately not run (overlap
# skip); or the team's job raised on every attempt that ran it; or it breaks the invariant.
FATE_RAN_ONCE = "ran_once"
FATE_DROPPED = "dropped"
FATE_EXHAUSTED = "exhausted"
FATE_SKIPPED = "skipped"
FATE_JOB_FAILED = "job_failed"
FATE_VIOLATED = "violated"
FATES = (
    FATE_RAN_ONCE,
    FATE_DROPPED,
    FATE_EXHAUSTED,
    FATE_SKIPPED,
    FATE_JOB_FAILED,
    FATE_VIOLATED,
)


@dataclass(frozen=True)
class RunVerdict:
    label: str
    job: str
    manual: bool
    successes: int
    failures: int  # executions that failed retryably (or lost their lease)
    problem: str | None  # why this run breaks the invariant
    exhausted: bool  # no success because the Scheduler ran out of retries
    dropped: bool = False  # no success because the Scheduler never delivered it
    skipped: bool = False  # deliberately not run: its job's overlap policy skipped it
    job_failed: bool = False  # no success because the team's job raised each time it ran

    @property
    def executions(self) -> int:
        return self.successes + self.failures

    @property
    def fate(self) -> str:
        """How this run ended, as the report states it (one of FATES)."""
        if self.problem is not None:
            return FATE_VIOLATED
        if self.dropped:
            return FATE_DROPPED
        if self.job_failed:
            return FATE_JOB_FAILED
        if self.exhausted:
            return FATE_EXHAUSTED
        if self.skipped:
            return FATE_SKIPPED
        return FATE_RAN_ONCE


@dataclass(frozen=True)
class Invariant:
    verdicts: tuple[RunVerdict, ...]
    strays: tuple[str, ...]  # executions of runs the Scheduler never delivered
    # Where the audit's findings disagree with the runs left without a success: a
    # run that is neither done nor reported is lost as surely as a dropped one.
    audit_problems: tuple[str, ...] = ()
    # Past times run by a backfill (never delivered by the Scheduler): each must run once.
    backfills: tuple[RunVerdict, ...] = ()

    @property
    def violations(self) -> list[str]:
        found = [f"{v.label}: {v.problem}" for v in self.verdicts + self.backfills if v.problem]
        found += [f"{label}: executed but never delivered" for label in self.strays]
        return found + [f"audit: {problem}" for problem in self.audit_problems]

    @property
    def exhausted(self) -> list[str]:
        return [v.label for v in self.verdicts if v.exhausted]

    @property
    def dropped(self) -> list[str]:
        return [v.label for v in self.verdicts if v.dropped]

    @property
    def skipped(self) -> list[str]:
        return [v.label for v in self.verdicts if v.skipped]

    @property
    def job_failed(self) -> list[str]:
        """Runs (backfilled ones too) the team's job failed: its failures, not the demo's."""
        return [v.label for v in self.verdicts + self.backfills if v.job_failed]

    @property
    def holds(self) -> bool:
        return not self.violations


def _overlaps(events: Sequence[ExecutionEvent]) -> str | None:
    """Why executions of one run overlapped in time or never ended, if they did."""
    spans: dict[str, list[float | None]] = {}
    for event in events:
        span = spans.setdefault(event.attempt_id, [None, None])
        span[0 if event.event == "start" else 1] = event.at
    if any(end is None for _, end in spans.values()):
        return "an execution never finished"
    ordered = sorted((start or 0.0, end or 0.0) for start, end in spans.values())
    for (_, first_end), (second_start, _) in itertools.pairwise(ordered):
        if second_start < first_end:
            return "two executions ran at the same time"
    return None


def check_invariant(
    results: Sequence[RunResult],
    events: Sequence[ExecutionEvent],
    backfilled: Sequence[tuple[str, str]] = (),
) -> Invariant:
    """The verdict on every delivered run, and on each backfilled (label, job) time."""
    by_run: dict[str, list[ExecutionEvent]] = defaultdict(list)
    for event in events:
        by_run[event.label].append(event)
    verdicts = []
    for result in results:
        plan = result.plan
        run_events = by_run.get(plan.label, [])
        ends = [e for e in run_events if e.event == "end"]
        successes = sum(1 for e in ends if e.outcome == "succeeded")
        failures = len(ends) - successes
        problem = _overlaps(run_events)
        exhausted = dropped = skipped = job_failed = False
        if successes > 1:
            problem = f"work succeeded {successes} times (must be exactly once)"
        elif successes == 0 and plan.fault is Fault.DROPPED:
            dropped = True
        elif not run_events and result.acknowledged and _skip_answered(result):
            skipped = True
        elif successes == 0 and _job_raised_last(ends) and not result.acknowledged:
            job_failed = True
        elif successes == 0 and result.exhausted:
            exhausted = True
        elif successes == 0:
            answered = "acknowledged" if result.acknowledged else "not acknowledged"
            problem = f"lost: no successful execution ({answered}, retries not exhausted)"
        verdicts.append(
            RunVerdict(
                plan.label,
                plan.job,
                plan.manual,
                successes,
                failures,
                problem,
                exhausted,
                dropped,
                skipped,
                job_failed,
            )
        )
    backfills = []
    for label, job in backfilled:
        run_events = by_run.get(label, [])
        ends = [e for e in run_events if e.event == "end"]
        successes = sum(1 for e in ends if e.outcome == "succeeded")
        problem = _overlaps(run_events) if run_events else None
        job_failed = successes == 0 and _job_raised_last(ends)
        if successes != 1 and not job_failed:
            problem = f"backfilled, but its work succeeded {successes} times (must be exactly once)"
        backfills.append(
            RunVerdict(
                label,
                job,
                False,
                successes,
                len(ends) - successes,
                problem,
                False,
                job_failed=job_failed,
            )
        )
    delivered = {result.plan.label for result in results} | {label for label, _ in backfilled}
    strays = tuple(sorted(label for label in by_run if label not in delivered))
    return Invariant(tuple(verdicts), strays, backfills=tuple(backfills))


def _job_raised_last(ends: Sequence[ExecutionEvent]) -> bool:
    """Whether the run's last execution ended with the team's job raising (`demo_jobs`)."""
    last = max(ends, key=lambda e: e.at, default=None)
    return last is not None and last.outcome == JOB_RAISED


def _skip_answered(result: RunResult) -> bool:
    """Whether the handler answered the run skipped: deliberately not run, never later."""
    return any(d.outcome == OUTCOME_OVERLAP_SKIPPED for d in result.deliveries)
