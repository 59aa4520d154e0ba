"""What a backfill would run: a job's schedule times in [start, end), held against the ledger.

The times come from the audit's own code (`audit.expected.expected_runs`,
daylight saving included) and the records are read by key, as the audit reads.
What a time gets depends on its record and on the mode (`--only`):

    record                             missing   failed         all
    no record, released, in progress   run       run            run
    failed for good                    left      rerun_failed   rerun_failed
    completed                          left      left           rerun_completed
    skipped (overlap: skip)            left alone in every mode: deliberately not run
    and, where no record says otherwise:
    inside a pause (`audit.pauses`)    left alone in every mode: deliberately not run
    no record, job state unknown       left alone, reported: nothing shows it was meant to run

A rerun of a completed time is a new generation of that time: a run under its own
key (`delivery.identify.generation_key`), numbered one past the reruns the ledger
already holds, so the first record stays as evidence and the rerun is claimed,
and so run, once. A run in progress is planned whatever its lease says by the
operator's clock: whether that lease is live is the handler's clock's to decide,
when the audit claims the time (`backfill.runs`): a live holder keeps it (the
request waits for it), a lease that ran out is taken over and run. No clock the
plan reads decides what runs, as for failures.
With --only failed or all, the attempt holding a run in progress is named
too: if it then fails for good, the audit reruns the time as it would a failure
the plan saw (seed 81 of the simulator: such a time, asked to run, was left failed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from runledger.audit.expected import expected_runs
from runledger.audit.findings import rfc3339
from runledger.audit.pauses import State, Timeline
from runledger.audit.runner import BATCH
from runledger.delivery.identify import generation_key, run_key
from runledger.ledger.overlap import skipped
from runledger.ledger.record import RunRecord, Status
from runledger.schedules import JobSchedule

ACTION_RUN = "run"
ACTION_RERUN_FAILED = "rerun_failed"
ACTION_RERUN_COMPLETED = "rerun_completed"
# `backfill --only`: which recorded fates a backfill runs again besides the times never run.
MODE_MISSING, MODE_FAILED, MODE_ALL = "missing", "failed", "all"
MODES = (MODE_MISSING, MODE_FAILED, MODE_ALL)
_TINY = timedelta(microseconds=1)


@dataclass(frozen=True)
class PlannedRun:
    job: str
    schedule_time: datetime
    action: str
    # rerun_failed: the failed attempt the plan saw; the audit reruns the time only while
    # its record is still that attempt's (`backfill.runs`), so no clock decides it. A run
    # in progress under --include-failed names its holder: rerun if that attempt fails.
    failed_attempt: str | None = None
    # rerun_completed: the rerun's generation (`delivery.identify.generation_key`); else 0.
    generation: int = 0

    def to_json(self) -> dict[str, object]:
        when = rfc3339(self.schedule_time)
        shown: dict[str, object] = {"job": self.job, "schedule_time": when, "action": self.action}
        if self.generation:
            shown["generation"] = self.generation
        return shown


@dataclass(frozen=True)
class TimeView:
    """One time of the range: what its record says, and what each mode would do with it.

    `actions` maps each of MODES to its action, or to "left alone: <why>".
    """

    schedule_time: datetime
    ledger: str
    actions: dict[str, str]

    def to_json(self) -> dict[str, object]:
        when = rfc3339(self.schedule_time)
        return {"schedule_time": when, "ledger": self.ledger, "modes": dict(self.actions)}


@dataclass(frozen=True)
class Plan:
    """What a backfill would run, the times it leaves alone by reason, and every time's view."""

    runs: list[PlannedRun]
    left: dict[str, int] = field(default_factory=dict)
    times: list[TimeView] = field(default_factory=list)


def _read_all(
    read: Callable[[Sequence[str]], Mapping[str, RunRecord]], wanted: Sequence[str]
) -> dict[str, RunRecord]:
    records: dict[str, RunRecord] = {}
    for offset in range(0, len(wanted), BATCH):
        records.update(read(wanted[offset : offset + BATCH]))
    return records


def rerun_counts(
    job: str,
    times: Sequence[datetime],
    read: Callable[[Sequence[str]], Mapping[str, RunRecord]],
    project: str,
    region: str,
) -> dict[datetime, int]:
    """How many reruns (generations past 0) the ledger holds for each of `times`.

    Generations are made in order, so generation N+1 is read only where N exists:
    one batched round per generation, none at all past the times never rerun.
    Any record counts, expired or not: its key is taken until TTL deletes it.
    """
    counts = dict.fromkeys(times, 0)
    looking = list(times)
    while looking:
        keys = {
            when: generation_key(job, when, project, region, counts[when] + 1) for when in looking
        }
        found = _read_all(read, list(keys.values()))
        looking = [when for when in looking if keys[when] in found]
        for when in looking:
            counts[when] += 1
    return counts


def plan(
    job: JobSchedule,
    start: datetime,
    end: datetime,
    read: Callable[[Sequence[str]], Mapping[str, RunRecord]],
    project: str,
    region: str,
    mode: str,
    now: datetime,
    line: Timeline,
    newest_first: bool = False,
) -> Plan:
    """The times of `job` in [start, end) a backfill in `mode` runs, oldest first unless
    `newest_first`; AuditTooLarge past expected.MAX_READS."""
    # expected_runs lists (start, end]; shifting both by a microsecond makes it [start, end).
    listed = [
        run
        for run in expected_runs([job], start - _TINY, end - _TINY)
        if start <= run.schedule_time < end
    ]
    keys = {
        instant: run_key(job.id, instant, project, region, manual=False)
        for run in listed
        for instant in run.instants
    }
    records = _read_all(read, list(keys.values()))
    present_of = {
        run.schedule_time: [
            records[keys[instant]]
            for instant in run.instants
            if keys[instant] in records and not records[keys[instant]].is_expired(now)
        ]
        for run in listed
    }
    completed = [
        when
        for when, present in present_of.items()
        if any(record.status is Status.COMPLETED for record in present)
    ]
    reruns = rerun_counts(job.id, completed, read, project, region) if mode == MODE_ALL else {}
    runs: list[PlannedRun] = []
    left: dict[str, int] = {}
    times: list[TimeView] = []
    for run in listed:
        present = present_of[run.schedule_time]
        state = _state_reason(line, run.schedule_time, bool(present))
        actions = {each: _action(present, each, state) for each in MODES}
        times.append(TimeView(run.schedule_time, _ledger_word(present), actions))
        action = actions[mode]
        if action.startswith("left alone: "):
            reason = action.removeprefix("left alone: ")
            left[reason] = left.get(reason, 0) + 1
            continue
        failed = [record.attempt_id for record in present if record.status is Status.FAILED]
        held = [r.attempt_id for r in present if r.status is Status.IN_PROGRESS]
        if action == ACTION_RERUN_FAILED:
            attempt: str | None = failed[0]
        else:
            attempt = held[0] if held and action == ACTION_RUN and mode != MODE_MISSING else None
        generation = reruns.get(run.schedule_time, 0) + 1 if action == ACTION_RERUN_COMPLETED else 0
        runs.append(
            PlannedRun(
                job.id,
                run.schedule_time,
                action,
                attempt,
                generation,
            )
        )
    if newest_first:
        runs.reverse()
        times.reverse()
    return Plan(runs, left, times)


def _ledger_word(present: list[RunRecord]) -> str:
    """What the time's record says, in one word (`none`: no record)."""
    for status in (Status.COMPLETED, Status.SKIPPED, Status.FAILED, Status.IN_PROGRESS):
        if any(record.status is status for record in present):
            return status.value
    return present[0].status.value if present else "none"


def _action(present: list[RunRecord], mode: str, state: str | None) -> str:
    """What `mode` does with a time whose records are `present`, or "left alone: <why>"."""
    if any(record.status is Status.COMPLETED for record in present):
        if mode == MODE_ALL:
            return ACTION_RERUN_COMPLETED
        return "left alone: completed (--only all reruns it)"
    if skipped(present):
        return "left alone: skipped (overlap: skip)"
    failed = any(record.status is Status.FAILED for record in present)
    if failed and mode == MODE_MISSING:
        return "left alone: failed (--only failed or all reruns it)"
    if state is not None:
        return f"left alone: {state}"
    return ACTION_RERUN_FAILED if failed else ACTION_RUN


def _state_reason(line: Timeline, moment: datetime, recorded: bool) -> str | None:
    """Why the job's state at `moment` keeps a backfill from running it, if it does."""
    state = line.at(moment)
    if state is State.PAUSED:
        return "paused (deliberately not run)"
    if state is State.UNKNOWN and not recorded:  # a record shows it was delivered
        return f"job state unknown ({line.why_at(moment)}): not run"
    return None
