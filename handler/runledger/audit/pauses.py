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

The handler's audit also weighs the log against what the audits saw of each job
(`watermarks.Sighting`: since when it is listed as it is, and when it was last
listed otherwise), because the log is late: an entry becomes readable only after
an ingestion lag, and Google publishes no bound for it. The audit takes every call
older than `PAUSE_LOG_LAG` as logged (`weighed`):

    the log and every sighting agree  -> each span known, as above
    a sighting, or the listing, shows -> the call may still be on its way: from
      a state the log has not reached    the last instant the state is known on,
      yet, and that sighting is newer    pending (its times wait, neither judged
      than PAUSE_LOG_LAG                 nor excused, for a later audit)
    no call logged and no sighting    -> pending throughout: a job paused for days
      at least PAUSE_LOG_LAG old         and one paused a minute ago read alike
    a sighting older than             -> one finding (the log misses a call);
      PAUSE_LOG_LAG the log disagrees    unknown throughout
      with

A time pending waits at most PAUSE_LOG_LAG and an audit's interval: then either
the log shows the call, or the disagreement is a finding and the job's missing
times are reported. With no log at all, a job paused at both audits is taken as
paused between them.

A time whose state is unknown is judged as any other (a record shows it was
delivered), but a missing one is reported `missed` with the reason and never
caught up. docs/audit.md tells each case.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
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
    PENDING = "pending"  # evidence still on its way (`weighed`): judged by a later audit


# The longest the audit waits for a PauseJob/ResumeJob to show in the log (see the doc).
PAUSE_LOG_LAG = timedelta(minutes=10)


@dataclass(frozen=True)
class Timeline:
    """A job's state from each step's instant on (the first step: from the beginning).

    `why` says, for a finding's detail, why a span is unknown. `edited`: spans
    [begin, end) (end None: on) where the job, enabled, may have had another schedule
    (`edited`), each with its state there (unknown or pending) and why.
    """

    steps: tuple[tuple[datetime | None, State], ...]
    why: str = ""
    # How the pause log disagrees with the live state or the last audit's sighting
    # (a call it does not show); "" if it does not. The audit reports it as a finding.
    conflict: str = ""
    edited: tuple[tuple[datetime, datetime | None, State, str], ...] = ()

    def at(self, moment: datetime) -> State:
        """The state at `moment`: a change at exactly `moment` holds from it."""
        return self._at(moment)[0]

    def why_at(self, moment: datetime) -> str:
        """Why the state at `moment` is what it is, for a finding's detail."""
        return self._at(moment)[1]

    def _at(self, moment: datetime) -> tuple[State, str]:
        state = self.steps[0][1]
        for since, step in self.steps[1:]:
            if since is not None and moment < since:
                break
            state = step
        if state is State.ENABLED:
            for begin, end, instead, why in self.edited:
                if begin <= moment and (end is None or moment < end):
                    return instead, why
        return state, self.why

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


def weighed(live: LiveJob, seen: Sighting | None, now: datetime) -> Timeline:
    """The job's spans from its pause log, held to the sightings and the listing at `now`.

    The log's calls cut the window into spans of one state each (the first span's from
    its first call; with none, from a sighting in it). A sighting or the listing in the
    last span that disagrees with it shows a call the log has not shown: pending from
    the last instant the span's state is known on, or, if that sighting is older than
    PAUSE_LOG_LAG (or in an earlier span), a conflict.
    """
    if live.history_from is None:
        line = from_history(live)
        if seen is not None and seen.paused and live.paused:
            return Timeline(((None, State.UNKNOWN), (seen.first, State.PAUSED)), line.why)
        return line
    origin, complete = live.history_from, now - PAUSE_LOG_LAG
    changes = sorted(live.changes, key=lambda change: change.at)
    starts = [origin, *(change.at for change in changes)]
    states: list[State | None] = [
        None if not changes else _state(not changes[0].paused),
        *(_state(change.paused) for change in changes),
    ]
    # What the audits saw, each over an interval it was seen so throughout; then the listing.
    seen_as: list[tuple[datetime, datetime, State]] = []
    if seen is not None:
        if seen.before is not None:
            seen_as.append((seen.before, seen.before, _state(not seen.paused)))
        seen_as.append((seen.first, seen.at, _state(seen.paused)))
    seen_as.append((now, now, _state(live.paused)))
    if states[0] is None:  # no call logged: the state the audits saw while the log is complete
        states[0] = next(
            (state for begin, end, state in seen_as if end >= origin and begin <= complete),
            None,
        )
        if states[0] is None:
            return Timeline(((None, State.UNKNOWN), (origin, State.PENDING)), _WAITING)
    known = starts[-1]  # the last span's state holds at least to here
    for at, state in ((moment, state) for begin, end, state in seen_as for moment in (begin, end)):
        if at < origin:
            continue
        index = max(i for i, start in enumerate(starts) if start <= at)
        last = index == len(starts) - 1
        if state is states[index]:
            known = max(known, at) if last else known
            continue
        if last and at > complete:  # a call the log may not show yet
            return Timeline((*_steps(starts, states), (known, State.PENDING)), _WAITING)
        conflict = (
            f"the audit saw it {state} at {_stamp(at)}, but its pause log, complete to "
            f"{_stamp(complete)}, shows it {states[index]} then (Cloud Scheduler lists it "
            f"{_state(live.paused)} now)"
        )
        return Timeline(((None, State.UNKNOWN),), _DISAGREES, conflict)
    return Timeline(_steps(starts, states), _BEFORE)


def edited(
    line: Timeline, live: LiveJob, seen: Sighting | None, epoch: datetime | None, now: datetime
) -> Timeline:
    """`line` with the job's UpdateJob and CreateJob calls since its epoch weighed in.

    The listing shows the schedule now, and the audits' sightings what it was then; an
    edit and its undo between two audits show nowhere else. Between the first and the
    last such call the job may have had another schedule: its times there are of
    unknown state (a missing one reported, never caught up). After the last, the
    schedule holds from it once an audit saw the job at an instant between the call and
    the log's complete end (`PAUSE_LOG_LAG` ago): the log shows no edit in between, so
    what that audit saw held throughout. Until then those times are pending.
    """
    calls = sorted(at for at in live.edits if epoch is None or at >= epoch)
    if not calls:
        return line
    first, last = calls[0], calls[-1]
    spans: list[tuple[datetime, datetime | None, State, str]] = []
    if first < last:
        why = (
            f"Cloud Scheduler's audit log shows its schedule edited at {_stamp(first)} and "
            f"{_stamp(last)}: it may have had another schedule between"
        )
        spans.append((first, last, State.UNKNOWN, why))
    sightings = () if seen is None else (seen.first, seen.at)
    if not any(last <= at <= now - PAUSE_LOG_LAG for at in sightings):
        why = (
            f"Cloud Scheduler's audit log shows its schedule edited at {_stamp(last)}, and "
            f"no audit saw the job between then and {_stamp(now - PAUSE_LOG_LAG)}"
        )
        spans.append((last, None, State.PENDING, why))
    return replace(line, edited=tuple(spans))


def _steps(
    starts: list[datetime], states: list[State | None]
) -> tuple[tuple[datetime | None, State], ...]:
    spans = [(at, state) for at, state in zip(starts, states, strict=True) if state is not None]
    return ((None, State.UNKNOWN), *spans)


def _state(paused: bool) -> State:
    return State.PAUSED if paused else State.ENABLED


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def sighting(
    live: Mapping[str, LiveJob] | None, job: str, now: datetime, mark: JobMark | None
) -> Sighting | None:
    """What the audits have seen of the job, to keep in its mark; Scheduler unread: the last."""
    state = None if live is None else live.get(job)
    seen = None if mark is None else mark.seen
    if state is None:
        return seen
    if seen is None:
        return Sighting(now, state.paused, now)
    if seen.paused is state.paused:
        return Sighting(now, state.paused, seen.first, seen.before)
    return Sighting(now, state.paused, now, seen.at)


def pending_at(run: ExpectedRun, lines: Mapping[str, Timeline]) -> bool:
    """Whether the evidence of the run's job's state at its schedule time is still on its way."""
    line = lines.get(run.job.id)
    return line is not None and line.at(run.schedule_time) is State.PENDING


def paused_at(run: ExpectedRun, lines: Mapping[str, Timeline]) -> bool:
    """Whether evidence shows the run's job paused at its schedule time."""
    line = lines.get(run.job.id)
    return line is not None and line.at(run.schedule_time) is State.PAUSED


_BEFORE = "before the pause history Cloud Scheduler's audit log gave"
_WAITING = (
    "Cloud Scheduler's audit log may not show its last pause or resume yet "
    f"(up to {int(PAUSE_LOG_LAG.total_seconds() // 60)} min)"
)
_DISAGREES = "its audit log disagrees with what the audits saw"
_UNSHOWN = "Cloud Scheduler's state differs from its audit log's last pause or resume"
