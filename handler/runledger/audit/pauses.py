"""Each job's state over time, from evidence: when it was paused, when enabled, when unknown.

The audit may excuse a time (deliberately not run) only where evidence shows
the job was paused then, and its catch-up may run a time only where evidence
shows the job was enabled then. The evidence is Cloud Scheduler's Admin
Activity audit log: every PauseJob and ResumeJob call on the job, and every
DeleteJob and CreateJob, read as a pause and a resume (`audit.pause_log`),
complete from the instant the listing read it from (`LiveJob.history_from`), with
the job's live state at the listing's end. A job's `userUpdateTime` is not
evidence: the API does not say a pause sets it.

    Scheduler read, its log read      -> each span known: paused between a PauseJob
                                         and the next ResumeJob, enabled otherwise;
                                         before `history_from`, unknown
    the log's last change disagrees   -> unknown from that change on (a change the
      with the live state                log has not shown yet)
    Scheduler read, its log not       -> unknown throughout
    Scheduler not read                -> unknown throughout
    no Scheduler at all (a local run) -> DEDUP_SCHEDULES' `paused` throughout

The handler's audit also keeps what it saw of each job at its last audit
(`watermarks.Sighting`): a log that says otherwise of that instant is missing a
call (the job's state is then unknown over the window), and, with no log, a job
paused at both audits is taken as paused between them.

A time whose state is unknown is judged as any other (a record shows it was
delivered), but a missing one is reported `missed` with the reason and never
caught up. docs/audit.md tells each case.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from runledger.audit.expected import ExpectedRun
from runledger.audit.scheduler_state import Lister, LiveJob
from runledger.exceptions import SchedulerAbsent, SchedulerUnreadable
from runledger.ledger.watermarks import JobMark, Sighting
from runledger.schedules import JobSchedule


class State(StrEnum):
    ENABLED = "enabled"
    PAUSED = "paused"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Timeline:
    """A job's state from each step's instant on (the first step: from the beginning).

    `why` says, for a finding's detail, why a span is unknown.
    """

    steps: tuple[tuple[datetime | None, State], ...]
    why: str = ""
    # How the pause log disagrees with the live state or the last audit's sighting
    # (a call it does not show); "" if it does not. The audit reports it as a finding.
    conflict: str = ""

    def at(self, moment: datetime) -> State:
        """The state at `moment`: a change at exactly `moment` holds from it."""
        state = self.steps[0][1]
        for since, step in self.steps[1:]:
            if since is not None and moment < since:
                break
            state = step
        return state

    @property
    def paused_since(self) -> datetime | None:
        """When the pause the job is in now began: the PauseJob the log shows (None: before
        the evidence starts; the first two steps are the evidence's start, not a call)."""
        return self.steps[-1][0] if len(self.steps) > 2 else None


def declared(job: JobSchedule) -> Timeline:
    """No Scheduler to ask (a local run): DEDUP_SCHEDULES' `paused` holds throughout."""
    return Timeline(((None, State.PAUSED if job.paused else State.ENABLED),))


def unknown(why: str) -> Timeline:
    return Timeline(((None, State.UNKNOWN),), why)


def from_history(live: LiveJob) -> Timeline:
    """The job's spans from its pause log and live state (see the module doc)."""
    if live.history_from is None:
        return unknown(f"no pause history ({live.history_unread})")
    now_state = State.PAUSED if live.paused else State.ENABLED
    changes = sorted(live.changes, key=lambda change: change.at)
    if not changes:
        return Timeline(((None, State.UNKNOWN), (live.history_from, now_state)), _BEFORE)
    first = State.ENABLED if changes[0].paused else State.PAUSED
    steps: list[tuple[datetime | None, State]] = [(None, State.UNKNOWN), (live.history_from, first)]
    steps += [(change.at, State.PAUSED if change.paused else State.ENABLED) for change in changes]
    if steps[-1][1] is not now_state:
        last = changes[-1].method
        conflict = (
            f"Cloud Scheduler lists it {now_state}, but its pause log's last call is a "
            f"{last} at {_stamp(changes[-1].at)}"
        )
        return Timeline((*steps[:-1], (changes[-1].at, State.UNKNOWN)), _UNSHOWN, conflict)
    return Timeline(tuple(steps), _BEFORE)


def timelines(
    schedules: Sequence[JobSchedule],
    live: Mapping[str, LiveJob] | None,
    unread: str | None,
    absent: bool,
) -> dict[str, Timeline]:
    """Each listed job's timeline: `live` as listed, or None and why (`unread`); `absent`:
    there is no Scheduler to read."""
    if live is None:
        if absent:
            return {job.id: declared(job) for job in schedules}
        why = f"Cloud Scheduler not read ({unread})"
        return {job.id: unknown(why) for job in schedules}
    return {job.id: from_history(live[job.id]) for job in schedules if job.id in live}


def job_timeline(lister: Lister, job: JobSchedule, since: datetime) -> Timeline:
    """One job's timeline from `since`, as the audit would take it, from one listing."""
    try:
        live = lister(since)
    except SchedulerAbsent:
        return declared(job)
    except SchedulerUnreadable as exc:
        return unknown(f"Cloud Scheduler not read ({exc})")
    if job.id not in live:
        return unknown("not in Cloud Scheduler")
    return from_history(live[job.id])


def with_sighting(line: Timeline, live: LiveJob | None, seen: Sighting | None) -> Timeline:
    """`line` weighed against what the last audit saw of the job (`seen`)."""
    if seen is None or live is None:
        return line
    saw = State.PAUSED if seen.paused else State.ENABLED
    if live.history_from is None:
        if seen.paused and live.paused:
            return Timeline(((None, State.UNKNOWN), (seen.at, State.PAUSED)), line.why)
        return line
    state = line.at(seen.at)
    if state is not State.UNKNOWN and state is not saw:
        why = f"its audit log disagrees with what the audit saw at {_stamp(seen.at)}"
        now_state = State.PAUSED if live.paused else State.ENABLED
        conflict = (
            f"the audit saw it {saw} at {_stamp(seen.at)}, but its pause log shows it "
            f"{state} then (Cloud Scheduler lists it {now_state} now)"
        )
        return Timeline(((None, State.UNKNOWN),), why, conflict)
    return line


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def sighting(
    live: Mapping[str, LiveJob] | None, job: str, now: datetime, mark: JobMark | None
) -> Sighting | None:
    """What this audit saw of the job, to keep in its mark; Scheduler unread: the last one."""
    state = None if live is None else live.get(job)
    if state is None:
        return None if mark is None else mark.seen
    return Sighting(now, state.paused)


def paused_at(run: ExpectedRun, lines: Mapping[str, Timeline]) -> bool:
    """Whether evidence shows the run's job paused at its schedule time."""
    line = lines.get(run.job.id)
    return line is not None and line.at(run.schedule_time) is State.PAUSED


_BEFORE = "before the pause history Cloud Scheduler's audit log gave"
_UNSHOWN = "Cloud Scheduler's state differs from its audit log's last pause or resume"
