"""The oracle's verdict on a settled history: each scheduled time's fate, and every rule broken.

Each scheduled time of the stack's schedule in (start, end] must end in exactly
one fate once the world has settled (docs/reliability.md, "The simulator"):

    ran        a body execution (not a forced run) took effect
    reported   an audit finding names it (or a span of its job's times that left the
               look-back unjudged), or a `drifted` finding its job while
               the console's edit held
    not run    deliberately: the operator meant the job paused then, or its
               record says `skipped` (overlap: skip), or the time is outside its
               job's active window (`startAt`/`endAt`: then no trigger may run it
               and no finding may name it)

A time with none is `lost`. Beyond the fate, the rules the history is held to:
a time never takes effect again once its completion was recorded (`ran twice`),
a finding is never made for a time whose completion was recorded before it
(`false finding`), catch-up never runs a paused or skipped time, and every time
a backfill asked to run is run after the ask, and a completed time a backfill
reruns (`--only all`) is run after the ask, once, and a dead letter is published
once per final failure and for nothing else (`_letters`). The history itself reports a
second body started under another's live lease, and a final record changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from runledger.delivery.dead_letter import (
    ID_ATTRIBUTE,
    KIND_FAILED,
    KIND_RETRIES_EXHAUSTED,
    dead_letter_id,
)
from runledger.delivery.identify import run_key
from runledger.facts import (
    OUTCOME_JOB_DRIFTED,
    TRIGGER_BACKFILL,
    TRIGGER_CATCH_UP,
)
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.record import NOT_RUN_STATUSES, Status
from scheduler_dedup.localrun.simulation import deploys
from scheduler_dedup.localrun.simulation.instants import listed
from scheduler_dedup.localrun.simulation.oracle import Execution, History, RerunAsk, Violation

_RUN_FINDINGS = ("run_missed", "run_stale", "run_failed", "run_released")


@dataclass(frozen=True)
class Expected:
    """One scheduled time of one job: its instant(s) and their run keys."""

    job: str
    instants: tuple[datetime, ...]
    keys: tuple[str, ...]
    # Outside its job's active window (`startAt`/`endAt`): deliberately not run.
    outside: bool = False
    # Sent by Scheduler after the stack left its job (`deploy_in_flight`): no fate needed.
    optional: bool = False


def expected_times(
    jobs: Sequence[tuple[str, str, str]],
    start: datetime,
    end: datetime,
    project: str,
    region: str,
    windows: Mapping[str, Callable[[datetime], bool]] | None = None,
) -> list[Expected]:
    """Every (job, schedule, zone)'s times in (start, end], as the stack's schedule has them.

    `windows`: each windowed job's test of a time (its first instant) being in its window.
    """
    windows = windows or {}
    times = []
    for job, schedule, zone in jobs:
        for instants in listed(schedule, zone, start, end):
            if instants[0] <= start:
                continue  # sent from the start on: a repeated wall time whose first is the start
            keys = tuple(run_key(job, at, project, region, manual=False) for at in instants)
            inside = windows.get(job, lambda _: True)(instants[0])
            times.append(Expected(job, instants, keys, outside=not inside))
    return times


def _within(timeline: list[tuple[datetime, bool]], at: datetime) -> bool:
    """Whether the last change at or before `at` turned the state on."""
    state = False
    for when, on in timeline:
        if when > at:
            break
        state = on
    return state


# A delivery reads its job's suspension, then claims: one that read just before the
# suspension landed may still start its body this long after it.
SUSPENSION_RACE = MAX_CLOCK_SKEW


def _suspended_since(timeline: list[tuple[datetime, bool]], at: datetime) -> bool:
    """Whether the job had been suspended for longer than the race allows at `at`."""
    return _within(timeline, at) and _within(timeline, at - SUSPENSION_RACE)


def _recorded_suspended_before(history: History, keys: Sequence[str], at: datetime) -> bool:
    return any(
        when < at and record is not None and record.status is Status.SUSPENDED
        for key in keys
        for when, record in history.records[key]
    )


def _completed_before(history: History, keys: Sequence[str], at: datetime) -> bool:
    return any(
        when < at and record is not None and record.status is Status.COMPLETED
        for key in keys
        for when, record in history.records[key]
    )


def _completed_since(
    history: History, keys: Sequence[str], at: datetime, status: Status = Status.COMPLETED
) -> bool:
    return any(
        when >= at and record is not None and record.status is status
        for key in keys
        for when, record in history.records[key]
    )


def check(history: History, expected: Sequence[Expected]) -> list[Violation]:
    """Every violation of the settled history: the history's own, then each time's."""
    violations = list(history.violations)
    violations += [Violation("-", None, "crash", crash) for crash in history.crashes]
    if history.unsettled:
        violations.append(Violation("-", None, "unsettled", "too few audits after the last time"))
    findings: dict[tuple[str, datetime], list[datetime]] = {}
    drifted: dict[str, list[datetime]] = {}
    for at, job, when, outcome, _ in history.findings:
        if when is not None and outcome in _RUN_FINDINGS:
            findings.setdefault((job, when), []).append(at)
        elif outcome == OUTCOME_JOB_DRIFTED:
            drifted.setdefault(job, []).append(at)
    for time in expected:
        violations += _fate(history, time, findings, drifted)
    for executions in history.executions.values():
        violations += [_lost_lease(history, e) for e in executions if _lost_lease(history, e)]
    violations += history.work.check(history.records)  # `job_work`
    unjudged = {(t.job, at) for t in expected if t.optional for at in t.instants}
    unjudged |= deploys.retired(history.deploys, expected)
    violations += history.releases.check(
        history.executions, history.records, history.findings, _excused(history, drifted, unjudged)
    )
    for ask in history.rerun_asks:
        violations += _rerun(history, ask)
    violations += _letters(history, {key for time in expected for key in time.keys})
    violations += _stray_runs(history, expected)
    violations += deploys.check(history.deploys, history.executions, history.findings)
    return violations


def _stray_runs(history: History, expected: Sequence[Expected]) -> list[Violation]:
    """A scheduled time's effect under a run key that is neither the time's nor an asked
    rerun's (`region_outage`: a region keying its deliveries by itself) escapes the
    ledger's one run per key: with any other effect of the time, it ran twice."""
    owned = {key for time in expected for key in time.keys}
    owned |= {ask.key for ask in history.rerun_asks}
    times = {(time.job, at): time for time in expected for at in time.instants}
    found = []
    for key, executions in history.executions.items():
        if key in owned:
            continue
        for stray in executions:
            time = times.get((stray.job, stray.schedule_time))
            if time is None or stray.manual or stray.effect_at is None:
                continue
            others = [
                e
                for other in time.keys
                for e in history.executions[other]
                if not e.manual and e.effect_at is not None
            ]
            if others:
                found.append(
                    Violation(
                        time.job,
                        time.instants[0],
                        "ran twice",
                        f"attempt {stray.attempt_id} ({stray.trigger}) took effect at "
                        f"{stray.effect_at:%H:%M:%S} under run key {key}, not the time's, "
                        f"as {others[0].attempt_id} did under its own",
                    )
                )
    return found


def _excused(
    history: History, drifted: dict[str, list[datetime]], unjudged: set[tuple[str, datetime]]
) -> Callable[[str, str, datetime], bool]:
    """Whether a run's time has a fate without a run or a finding of its own (`_fate`):
    its job meant paused or drifted (and reported so) then, or its last record not run
    (seed 60: a time of a drifted window, released, is judged by no audit), or it is a
    time the audit leaves unjudged around a deploy (`deploy_in_flight`)."""

    def excused(key: str, job: str, when: datetime) -> bool:
        last = [r for _, r in history.records[key][-1:] if r is not None]
        return (
            (job, when) in unjudged
            or _within(history.intents[job], when)
            or (_within(history.drifts[job], when) and bool(drifted.get(job)))
            or any(r.status in NOT_RUN_STATUSES for r in last)
        )

    return excused


# The record status each kind of dead letter is about (`delivery.dead_letter`).
_LETTER_STATUS = {KIND_FAILED: Status.FAILED, KIND_RETRIES_EXHAUSTED: Status.RELEASED}


def _letters(history: History, judged: set[str]) -> list[Violation]:
    """A dead letter is published once per final failure, and for nothing else.

    Each stored copy must be about its run's record as it stood: that status, that
    attempt. A copy stored while the run's note already named it is one too many (a
    copy again after a lost answer, the note not written, is the guarantee's slack,
    and consumers dedupe it by `dead_letter_id`). Every judged time whose run stays
    failed for good has its letter stored, or a publish logged failed after it failed.
    """
    found: list[Violation] = []
    stored: set[str] = set()
    for at, attributes, record in history.letters:
        key, kind, letter = attributes["run_key"], attributes["kind"], attributes[ID_ATTRIBUTE]
        stored.add(letter)
        job = "-" if record is None else record.job
        when = None if record is None else record.schedule_time
        if (
            record is None
            or record.status is not _LETTER_STATUS[kind]
            or dead_letter_id(key, record.attempt_id, kind) != letter
        ):
            found.append(
                Violation(job, when, "dead letter for no failure", f"{kind} at {at:%H:%M:%S}")
            )
        elif record.dead_letter_id == letter:
            found.append(
                Violation(job, when, "dead letter after its note", f"{kind} again at {at:%H:%M:%S}")
            )
    for key in judged:
        final = next((r for _, r in reversed(history.records[key]) if r is not None), None)
        if final is None or final.status is not Status.FAILED:
            continue
        if dead_letter_id(key, final.attempt_id, KIND_FAILED) in stored:
            continue
        failed_at = next(at for at, r in history.records[key] if r is final)
        if not any(at >= failed_at for at in history.unpublished[key]):
            found.append(
                Violation(
                    final.job,
                    final.schedule_time,
                    "dead letter lost",
                    f"failed for good at {failed_at:%H:%M:%S} (attempt {final.attempt_id}): "
                    "no letter stored, no failed publish logged",
                )
            )
    return found


def _rerun(history: History, ask: RerunAsk) -> list[Violation]:
    """A rerun of a completed time (`--only all`) runs once: after the ask, and never again.

    It is a run of its own generation's key, so its first record is untouched (the
    history reports a final record changed) and its own effects are held to the rule
    a scheduled time is: one once the rerun's completion was recorded, no more.
    """
    runs = sorted(history.executions[ask.key], key=lambda e: e.start)
    effects = [e for e in runs if e.effect_at is not None]
    found = [
        Violation(
            ask.job,
            ask.schedule_time,
            "rerun ran twice",
            f"attempt {later.attempt_id} took effect at {later.effect_at:%H:%M:%S} after "
            "the rerun's completion was recorded",
        )
        for later in effects[1:]
        if _completed_before(history, [ask.key], later.start)
    ]
    # The backfill reporting the time past its retention (`ttl_deletion`) answers the ask,
    # and so does the rerun recorded `suspended` (`suspension`): deliberately not run.
    reported = history.past_retention.get((ask.job, ask.schedule_time), ask.at) > ask.at
    suspended = any(
        when >= ask.at and record is not None and record.status is Status.SUSPENDED
        for when, record in history.records[ask.key]
    )
    if not (reported or suspended) and not any(run.start >= ask.at for run in runs):
        found.append(
            Violation(
                ask.job,
                ask.schedule_time,
                "rerun asked, never run",
                f"a backfill --only all asked at {ask.at:%H:%M:%S}; no attempt since",
            )
        )
    return found


def _lost_lease(history: History, execution: Execution) -> Violation | None:
    """A holder refused a write and told its lease was lost while its record still held it."""
    lost = execution.lease_lost_at
    if lost is None:
        return None
    own = None
    for when, record in history.records[execution.key]:
        if when > lost or record is None:
            continue
        if when >= execution.start and record.attempt_id != execution.attempt_id:
            return None  # another attempt took the run over: a true loss
        if record.attempt_id == execution.attempt_id:
            own = record
    if own is None or own.status is not Status.IN_PROGRESS:
        return None
    # Only the holder's own refused writes count: another attempt's claim refused on the
    # same run says nothing of this holder. A holder none of whose writes was refused gave
    # up as its own clock passed the lease it knew (a renewal that landed with its answer
    # lost, then no store to read it back from, leaves the record's lease later than that).
    refused = history.refusals[execution.key]
    if not any(execution.start < at <= lost and by is execution.task for at, by in refused):
        return None
    if lost + MAX_CLOCK_SKEW >= own.lease_expires:
        return None  # its lease ran out by its own clock
    return Violation(
        execution.job,
        execution.schedule_time,
        "lease lost, not taken over",
        f"attempt {execution.attempt_id} was told at {lost:%H:%M:%S} it lost the run, whose "
        f"record still gave it the lease until {own.lease_expires:%H:%M:%S}, no other attempt "
        "having written it",
    )


def _fate(
    history: History,
    time: Expected,
    findings: dict[tuple[str, datetime], list[datetime]],
    drifted: dict[str, list[datetime]],
) -> list[Violation]:
    job, when = time.job, time.instants[0]
    found: list[Violation] = []
    runs = [e for key in time.keys for e in history.executions[key] if not e.manual]
    effects = sorted((e for e in runs if e.effect_at is not None), key=lambda e: e.start)
    reported = sorted(at for instant in time.instants for at in findings.get((job, instant), ()))
    paused = _within(history.intents[job], when)
    records = [r for key in time.keys for _, r in history.records[key][-1:] if r is not None]
    skipped = any(r.status is Status.SKIPPED for r in records)
    suspended = any(r.status is Status.SUSPENDED for r in records)
    drift = _within(history.drifts[job], when) and bool(drifted.get(job))

    def violation(rule: str, detail: str) -> None:
        found.append(Violation(job, when, rule, detail))

    if time.outside:
        # Outside its job's active window: never run by any trigger, never reported.
        for run in runs:
            violation(
                "outside-window time run",
                f"attempt {run.attempt_id} ({run.trigger}) started at {run.start:%H:%M:%S}",
            )
        for at in reported:
            violation("outside-window time reported", f"a finding at {at:%H:%M:%S}")
        return found

    for later in effects[1:]:
        if _completed_before(history, time.keys, later.start):
            violation(
                "ran twice",
                f"attempt {later.attempt_id} ({later.trigger}) took effect "
                f"at {later.effect_at:%H:%M:%S} after the time's completion was recorded",
            )
    for at in reported:
        if _completed_before(history, time.keys, at):
            violation(
                "false finding", f"reported at {at:%H:%M:%S} after its completion was recorded"
            )
    for run in runs:
        if run.trigger == TRIGGER_CATCH_UP and (paused or skipped):
            why = "paused" if paused else "skipped"
            violation(
                f"{why} time run by catch-up", f"attempt {run.attempt_id} at {run.start:%H:%M:%S}"
            )
        if run.trigger == TRIGGER_CATCH_UP and _recorded_suspended_before(
            history, time.keys, run.start
        ):
            violation(
                "suspended time run by catch-up",
                f"attempt {run.attempt_id} at {run.start:%H:%M:%S}",
            )
        if _suspended_since(history.suspensions[job], run.start):
            violation(
                "run while suspended",
                f"attempt {run.attempt_id} ({run.trigger}) started at {run.start:%H:%M:%S}",
            )
        if run.trigger == TRIGGER_BACKFILL and skipped:
            violation(
                "skipped time run by backfill", f"attempt {run.attempt_id} at {run.start:%H:%M:%S}"
            )
    for ask in history.asks:
        # A run in progress when asked is left to its holder while its lease is live: its
        # completion recorded since (its effect may predate the ask) is the run asked for,
        # and so is its terminal failure for a request without --include-failed (seed 81).
        after = (
            any(r.start >= ask.at for r in runs)
            or any(e.effect_at >= ask.at for e in effects)
            or _completed_since(history, time.keys, ask.at)
            or (
                not ask.include_failed
                and _completed_since(history, time.keys, ask.at, Status.FAILED)
            )
            # Reported instead: its record would expire before a run finished (`ttl_deletion`).
            or history.past_retention.get((job, when), ask.at) > ask.at
        )
        if ask.job == job and when in ask.times and not after and not suspended:
            violation(
                "asked, never run", f"a backfill asked at {ask.at:%H:%M:%S}; no attempt since"
            )
    # Reported with the span of its job's times an audit names as gone from its look-back.
    named = any(first <= when <= last for first, last in history.unjudged.get(job, ()))
    if not (
        effects or reported or named or paused or skipped or drift or suspended or time.optional
    ):
        violation("lost", "never ran, no finding, not paused, not skipped, not suspended")
    return found
