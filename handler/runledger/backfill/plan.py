"""What a backfill would run: a job's schedule times in [start, end), held against the ledger.

The times come from the audit's own code (`audit.expected.expected_runs`,
daylight saving included) and the records are read by key, as the audit reads:

    completed                          -> left alone
    skipped (overlap: skip)            -> left alone: deliberately not run
    failed for good                    -> rerun_failed with --include-failed, else left
    no record, released, in progress   -> run
    and, where no record says otherwise:
    inside a pause (`audit.pauses`)    -> left alone: deliberately not run
    no record, job state unknown       -> left alone, reported: nothing shows it was meant to run

A run in progress is planned whatever its lease says by the operator's clock:
whether that lease is live is the handler's clock's to decide, when the audit
claims the time (`backfill.runs`): a live holder keeps it (the request waits
for it), a lease that ran out is taken over and run. No clock the plan reads
decides what runs, as for failures. With --include-failed, the attempt holding
a run in progress is named too: if it then fails for good, the audit reruns the
time as it would a failure the plan saw (seed 81 of the simulator: such a time,
asked to run, was left failed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from runledger.audit.expected import expected_runs
from runledger.audit.findings import rfc3339
from runledger.audit.pauses import State, Timeline
from runledger.audit.runner import BATCH
from runledger.delivery.identify import run_key
from runledger.ledger.overlap import skipped
from runledger.ledger.record import RunRecord, Status
from runledger.schedules import JobSchedule

ACTION_RUN = "run"
ACTION_RERUN_FAILED = "rerun_failed"
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

    def to_json(self) -> dict[str, str]:
        when = rfc3339(self.schedule_time)
        return {"job": self.job, "schedule_time": when, "action": self.action}


@dataclass(frozen=True)
class Plan:
    """What a backfill would run, and the times it leaves alone, by reason."""

    runs: list[PlannedRun]
    left: dict[str, int] = field(default_factory=dict)


def plan(
    job: JobSchedule,
    start: datetime,
    end: datetime,
    read: Callable[[Sequence[str]], Mapping[str, RunRecord]],
    project: str,
    region: str,
    include_failed: bool,
    now: datetime,
    line: Timeline,
) -> Plan:
    """The times of `job` in [start, end) a backfill runs; AuditTooLarge past expected.MAX_READS."""
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
    wanted = list(keys.values())
    records: dict[str, RunRecord] = {}
    for offset in range(0, len(wanted), BATCH):
        records.update(read(wanted[offset : offset + BATCH]))
    runs: list[PlannedRun] = []
    left: dict[str, int] = {}
    for run in listed:
        present = [
            records[keys[instant]]
            for instant in run.instants
            if keys[instant] in records and not records[keys[instant]].is_expired(now)
        ]
        reason = _left_because(present, include_failed) or _state_reason(
            line, run.schedule_time, bool(present)
        )
        if reason is not None:
            left[reason] = left.get(reason, 0) + 1
            continue
        failed = [record.attempt_id for record in present if record.status is Status.FAILED]
        held = [r.attempt_id for r in present if r.status is Status.IN_PROGRESS]
        action = ACTION_RERUN_FAILED if failed else ACTION_RUN
        attempt = failed[0] if failed else (held[0] if held and include_failed else None)
        runs.append(PlannedRun(job.id, run.schedule_time, action, attempt))
    return Plan(runs, left)


def _state_reason(line: Timeline, moment: datetime, recorded: bool) -> str | None:
    """Why the job's state at `moment` keeps a backfill from running it, if it does."""
    state = line.at(moment)
    if state is State.PAUSED:
        return "paused (deliberately not run)"
    if state is State.UNKNOWN and not recorded:  # a record shows it was delivered
        return f"job state unknown ({line.why}): not run"
    return None


def _left_because(present: list[RunRecord], include_failed: bool) -> str | None:
    if any(record.status is Status.COMPLETED for record in present):
        return "completed"
    if skipped(present):
        return "skipped (overlap: skip)"
    if any(record.status is Status.FAILED for record in present) and not include_failed:
        return "failed (add --include-failed to rerun)"
    return None
