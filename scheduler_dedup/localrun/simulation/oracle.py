"""The history of one seed and the checker that holds it against the rule.

Like Jepsen's Chronos checker, it sets the times each job should have run (the
stack's schedule, daylight saving as the audit resolves it) against what
actually ran: the job bodies report each execution here (start, lease checks,
end, effect), the store reports every record it wrote, the audit's log lines
give the findings, and the operator's actions say what was meant (a pause, an
unpause, a console edit, a backfill's ask). `check` then returns one violation
per broken rule, each naming the job and time it is about (`checker.check`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from runledger.delivery.identify import parse_schedule_time
from runledger.facts import OUTCOME_AUDIT_SUMMARY
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.record import FINAL_STATUSES, RunRecord, Status
from scheduler_dedup.localrun.simulation.deploys import DeployHistory
from scheduler_dedup.localrun.simulation.release_history import Releases
from scheduler_dedup.localrun.simulation.violation import Violation
from scheduler_dedup.localrun.simulation.work_history import WorkHistory

# How far one instance's clock may be off (`scenario.Scenario.skew`).
INSTANCE_SKEW = timedelta(seconds=1)
Moment = tuple[str, datetime]  # (job, schedule time): what a trace is about
__all__ = ["Ask", "Execution", "History", "Moment", "Violation"]


@dataclass
class Execution:
    """One run of a job body: when it started and ended, and whether its effect happened."""

    job: str
    schedule_time: datetime
    key: str
    manual: bool
    trigger: str
    attempt_id: str
    start: datetime
    held: list[datetime] = field(default_factory=list)
    ended: datetime | None = None
    outcome: str | None = None  # effect, error, failed; None: it never got that far
    effect_at: datetime | None = None
    lease_lost_at: datetime | None = None  # told its lease was lost (a check, or its final write)
    task: Any = None  # the request it ran in


@dataclass(frozen=True)
class Ask:
    """A backfill request as the operator made it, and the times it asked to run."""

    at: datetime
    job: str
    times: frozenset[datetime]
    include_failed: bool = True


@dataclass(frozen=True)
class RerunAsk:
    """A completed time a backfill (`--only all`) asked to rerun, as its generation's run key."""

    at: datetime
    job: str
    schedule_time: datetime
    key: str


class History:
    def __init__(self) -> None:
        self.executions: dict[str, list[Execution]] = defaultdict(list)
        self.records: dict[str, list[tuple[datetime, RunRecord | None]]] = defaultdict(list)
        self.findings: list[tuple[datetime, str, datetime | None, str, Any]] = []
        # Spans of a job's times an audit named as gone from its look-back unjudged.
        self.unjudged: dict[str, list[tuple[datetime, datetime]]] = {}
        # Each audit's finding lines not yet followed by its summary, by the task logging them.
        self._unsummed: dict[Any, list[tuple[datetime, str, datetime | None, str, Any]]] = {}
        self.intents: dict[str, list[tuple[datetime, bool]]] = defaultdict(list)
        self.drifts: dict[str, list[tuple[datetime, bool]]] = defaultdict(list)
        # Each job's suspension as its document was written: when, and suspended or not.
        self.suspensions: dict[str, list[tuple[datetime, bool]]] = defaultdict(list)
        self.asks: list[Ask] = []
        self.rerun_asks: list[RerunAsk] = []
        # Dead letters (`dead_letters`): each stored copy (when, its attributes, the run's
        # record as the store held it then), and each run key a publish was logged failed for.
        self.letters: list[tuple[datetime, dict[str, str], RunRecord | None]] = []
        self.unpublished: dict[str, list[datetime]] = defaultdict(list)
        self.timeline: dict[Moment, list[tuple[datetime, str]]] = defaultdict(list)
        self.events: list[tuple[datetime, str]] = []
        self.violations: list[Violation] = []
        self.summaries: list[datetime] = []  # each audit summary's judging time
        # Each run key's refused writes: when, and the task (request) whose write it was.
        self.refusals: dict[str, list[tuple[datetime, Any]]] = defaultdict(list)
        self.unsettled = False
        self.crashes: list[str] = []
        self.work = WorkHistory()  # checkpoints and outputs (`job_work`)
        self.releases = Releases()  # the operator's `ops release`s (`ops_release`)
        self.deploys = DeployHistory()  # the class's job in Scheduler (`deploy_in_flight`)
        # Backfill times the audit reported it could no longer run, as (job, time) -> when
        # (`backfill_past_retention`: the record would expire before the run finished).
        self.past_retention: dict[tuple[str, datetime], datetime] = {}

    # -- what the world reports --

    def started(self, context: Any, now: datetime, task: Any) -> Execution:
        execution = Execution(
            context.job_name,
            context.schedule_time,
            context.run_id,
            context.manual,
            context.trigger,
            context.attempt_id,
            now,
            task=task,
        )
        for other in self.executions[execution.key]:
            lease = self._lease_of(other)
            if lease is not None and other.task is not None:
                lease -= other.task.skew  # when it runs out by the holder's own clock
            if other.ended is None and lease is not None and now < lease:
                self.violations.append(
                    Violation(
                        execution.job,
                        execution.schedule_time,
                        "two live holders",
                        f"attempt {execution.attempt_id} ({execution.trigger}) started at "
                        f"{now:%H:%M:%S} while {other.attempt_id} ({other.trigger}) still ran "
                        f"under its lease until {lease:%H:%M:%S.%f} (its own clock)",
                    )
                )
        self.executions[execution.key].append(execution)
        self.note(
            execution.job,
            execution.schedule_time,
            now,
            f"body starts: attempt {execution.attempt_id}, trigger {execution.trigger}"
            f"{', manual' if execution.manual else ''}",
        )
        return execution

    def ended(self, execution: Execution, now: datetime) -> None:
        execution.ended = now
        self.note(
            execution.job,
            execution.schedule_time,
            now,
            f"body ends: attempt {execution.attempt_id}: {execution.outcome or 'cut off'}",
        )

    def refused(self, key: str, task: Any, now: datetime) -> None:
        """`task`'s write to the run `key` was refused: its version moved on, or it was gone."""
        self.refusals[key].append((now, task))

    def lease_lost(self, task: Any, job: str, now: datetime) -> None:
        """`task`'s delivery of `job` was answered lease_lost: its final write was refused.

        Only that job's body counts: an audit's request also runs catch-ups' bodies.
        """
        for executions in self.executions.values():
            for execution in executions:
                mine = execution.task is task and execution.job == job
                if mine and execution.lease_lost_at is None:
                    execution.lease_lost_at = now

    def _lease_of(self, execution: Execution) -> datetime | None:
        for _, record in reversed(self.records[execution.key]):
            if record is not None and record.attempt_id == execution.attempt_id:
                return record.lease_expires if record.status is Status.IN_PROGRESS else None
        return None

    def backfill_past_retention(self, job: str, when: datetime, now: datetime) -> None:
        self.past_retention.setdefault((job, when), now)
        self.note(job, when, now, "backfill reports it past the retention: not run")

    def ttl_deleted(self, key: str, now: datetime) -> None:
        """TTL deleted the run `key` (`ttl_deletion`): a deletion, not a write of the system's."""
        last = next((r for _, r in reversed(self.records.get(key, [])) if r is not None), None)
        if last is not None:
            self.note(last.job, last.schedule_time, now, "record deleted by TTL")

    def record_written(self, now: datetime, key: str, record: RunRecord | None) -> None:
        written = self.records[key]
        before = next((r for _, r in reversed(written) if r is not None), None)
        written.append((now, record))
        if record is None:
            return
        if before is not None and before.status != record.status:
            released = before.status is Status.FAILED and record.status is Status.RELEASED
            if before.status in FINAL_STATUSES and not released and not before.is_expired(now):
                self.violations.append(
                    Violation(
                        record.job,
                        record.schedule_time,
                        "final record changed",
                        f"{before.status.value} ({before.attempt_id}) became "
                        f"{record.status.value} ({record.attempt_id}) at {now:%H:%M:%S}",
                    )
                )
        if record.status is Status.SKIPPED and not self._holder_live(record, now):
            self.violations.append(
                Violation(
                    record.job,
                    record.schedule_time,
                    "skipped for no run",
                    f"recorded skipped at {now:%H:%M:%S} yielding to {record.yielded_to}, "
                    "whose own record shows no live lease",
                )
            )
        if record.status is Status.SKIPPED and record.trigger == "backfill":
            self.violations.append(
                Violation(
                    record.job,
                    record.schedule_time,
                    "backfill recorded skipped",
                    f"a time the operator asked to run was recorded skipped at {now:%H:%M:%S}",
                )
            )
        self.note(
            record.job,
            record.schedule_time,
            now,
            f"record {record.status.value}: attempt {record.attempt_id}, "
            f"trigger {record.trigger}, lease {record.lease_expires:%H:%M:%S}"
            f"{', manual' if record.manual else ''}",
        )

    def _holder_live(self, record: RunRecord, now: datetime) -> bool:
        """Whether the run a skip yielded to still held a live lease by its own record.

        A dead holder's record keeps its lease until it runs out, so a skip then is
        by design; a record that shows the lease over (given up, ended, finished)
        while its job's slot still names it running is not. One instance's skew of
        slack on top of the takeover margin.
        """
        for _, holder in reversed(self.records.get(record.yielded_to or "", [])):
            if holder is not None:
                live_until = holder.lease_expires + MAX_CLOCK_SKEW + INSTANCE_SKEW
                return holder.status is Status.IN_PROGRESS and now < live_until
        return False

    def finding_line(self, now: datetime, text: str, task: Any) -> None:
        """An audit's finding line, or its summary: the findings it judged at its window's end.

        Finding lines come before their summary, and a catch-up runs before its
        finding's line, so a finding is dated by its own audit's summary's
        window_end, the audit's start (less the skew its instance's clock may
        have); `task` is the audit's request, which says which summary is its.
        """
        for line in text.splitlines():
            entry = json.loads(line)
            if entry.get("outcome") == OUTCOME_AUDIT_SUMMARY:
                judged = parse_schedule_time(entry["window_end"]) - MAX_CLOCK_SKEW
                self.summaries.append(judged)
                for _, job, when, outcome, catch_up in self._unsummed.pop(task, []):
                    self.findings.append((judged, job, when, outcome, catch_up))
                continue
            outcome = entry.get("outcome", "")
            stamp = entry.get("schedule_time")
            when = None if stamp is None else parse_schedule_time(stamp)
            # Dated by the audit's start until its summary says: it may die before that.
            start = task.started - MAX_CLOCK_SKEW
            found = (start, entry.get("job", ""), when, outcome, entry.get("catch_up"))
            self._unsummed.setdefault(task, []).append(found)
            if when is not None:
                self.note(
                    entry.get("job", ""),
                    when,
                    now,
                    f"audit finding {outcome}, catch-up: {entry.get('catch_up')}",
                )
            else:
                self.event(now, f"audit finding {outcome} for job {entry.get('job')}")
            if "from" in entry and "to" in entry:
                span = (parse_schedule_time(entry["from"]), parse_schedule_time(entry["to"]))
                self.unjudged.setdefault(entry.get("job", ""), []).append(span)

    def summaries_since(self, moment: datetime) -> int:
        return sum(1 for judged in self.summaries if judged >= moment)

    def settle(self) -> None:
        """The seed's end: the lines of an audit that never logged its summary count as logged."""
        for found in self._unsummed.values():
            self.findings.extend(found)
        self._unsummed.clear()

    def intent(self, job: str, now: datetime, paused: bool) -> None:
        self.intents[job].append((now, paused))
        self.event(now, f"{job} {'paused' if paused else 'due again'} (operator's intent)")

    def suspension_written(self, now: datetime, suspension: Any) -> None:
        """A job's suspension document landed; a change of its state goes to the timeline."""
        changes = self.suspensions[suspension.job]
        if (changes[-1][1] if changes else False) != suspension.suspended:
            changes.append((now, suspension.suspended))
            what = f"suspended by {suspension.by}" if suspension.suspended else "resumed"
            self.event(now, f"{suspension.job} {what} (ledger)")

    def drift(self, job: str, now: datetime, drifted: bool) -> None:
        self.drifts[job].append((now, drifted))
        self.event(now, f"{job} {'drifted' if drifted else 'back to its stack schedule'}")

    def backfill_asked(
        self,
        now: datetime,
        job: str,
        times: list[datetime],
        text: str,
        include_failed: bool = True,
    ) -> None:
        """The times a backfill asks to run: its plan by the one true clock, at the request."""
        self.asks.append(Ask(now, job, frozenset(times), include_failed))
        self.event(now, f"{text}: asks {len(times)} time(s)")
        for when in times:
            self.note(job, when, now, "asked by a backfill")

    def letter_stored(self, now: datetime, attributes: dict[str, str]) -> None:
        key = attributes["run_key"]
        current = next((r for _, r in reversed(self.records[key]) if r is not None), None)
        self.letters.append((now, attributes, current))
        if current is not None:
            kind = attributes["kind"]
            self.note(current.job, current.schedule_time, now, f"dead letter {kind} stored")

    def letter_unpublished(self, now: datetime, key: str) -> None:
        self.unpublished[key].append(now)

    def reruns_asked(self, now: datetime, reruns: list[tuple[str, datetime, str]]) -> None:
        """The completed times a recorded `--only all` request reruns: (job, time, run key)."""
        for job, when, key in reruns:
            self.rerun_asks.append(RerunAsk(now, job, when, key))
            self.note(job, when, now, f"rerun asked by a backfill (run key {key[:12]})")

    def note(self, job: str, when: datetime, now: datetime, text: str) -> None:
        self.timeline[job, when].append((now, text))

    def event(self, now: datetime, text: str) -> None:
        self.events.append((now, text))
