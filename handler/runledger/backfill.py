"""Exact backfill: run a job's past scheduled times again, once each, through the ledger.

`python -m runledger.ops backfill` plans and records a request; the handler's
audit job runs it. The plan lists the job's schedule times in [start, end) with
the audit's own code (`expected.expected_runs`, daylight saving included) and
reads their records by key, as the audit does:

    completed                          -> left alone
    in progress under a live lease     -> left to its holder
    failed for good                    -> rerun_failed with --include-failed, else left
    no record, released, lease ran out -> run

The request document (`backfill_store`) is keyed by what it asks, so the same
backfill recorded twice is one request; a queue document lists the pending ones.
The audit (`install_audit`) takes each pending request in order and runs its
times through `App.catch_up` with trigger `backfill`: the same claim as a
delivery, so a late Scheduler retry racing it still gives one execution, and a
time completed since the plan is a duplicate, not a second run. A failed run is
released first, fenced by the version read, and only if it failed before the
request was made: a run the backfill itself reran and that failed again is not
rerun by a later audit. After each time the request's position moves on
(fenced), so an audit that stops half-way leaves the rest to the next one and
never repeats a time; at the end the request is marked done and leaves the queue.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from runledger.delivery import run_key
from runledger.exceptions import RecordExists, StoreUnavailable, VersionConflict
from runledger.expected import expected_runs
from runledger.facts import LEDGER_UNAVAILABLE_OUTCOMES, TRIGGER_BACKFILL
from runledger.ledger import Ledger, ReleaseRefused, RunIdentity, may_take_over
from runledger.log import log_line
from runledger.record import RunRecord, Status
from runledger.schedules import JobSchedule

if TYPE_CHECKING:
    from runledger.config import Settings

ACTION_RUN = "run"
ACTION_RERUN_FAILED = "rerun_failed"
PENDING, DONE = "pending", "done"
# Outcomes of `App.catch_up` in which the job ran (the rest are duplicates or store errors).
RAN_OUTCOMES = frozenset({"completed", "failed_terminal", "failed_retryable", "lease_lost"})
# Keys per batch read, one BatchGetDocuments call each (as the audit reads).
BATCH = 300
# A backfill run's line is a warning or an error where someone should look.
_SEVERITY = {
    "failed_terminal": "ERROR",
    "failed_retryable": "WARNING",
    "lease_lost": "WARNING",
    "job_not_served": "WARNING",
    "past_retention": "WARNING",
} | dict.fromkeys(LEDGER_UNAVAILABLE_OUTCOMES, "ERROR")
# Rounds of read-then-write on the queue while other writers keep changing it.
_QUEUE_ROUNDS = 5
_TINY = timedelta(microseconds=1)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class BackfillDocs(Protocol):
    """Read, create and compare-and-set plain documents by key (`backfill_store`)."""

    def get(self, key: str) -> tuple[dict[str, Any], Any] | None:
        """The document and its version, or None."""

    def create(self, key: str, data: Mapping[str, Any]) -> Any:
        """Write a new document, return its version; RecordExists if the key is taken."""

    def update(self, key: str, changes: Mapping[str, Any], version: Any) -> Any:
        """Change fields if still at `version`, return the new one; VersionConflict if not."""


def firestore_backfills(settings: Settings) -> Callable[[], BackfillDocs]:
    """The handler's backfill documents, in its ledger's database; connects on first use.

    Google's client is imported only then, never on a delivery's path.
    """
    made: list[BackfillDocs] = []

    def docs() -> BackfillDocs:
        if not made:
            from google.cloud import firestore

            from runledger.backfill_store import FirestoreBackfills

            client = firestore.Client(database=settings.database)
            made.append(FirestoreBackfills(client, settings.collection))
        return made[0]

    return docs


@dataclass(frozen=True)
class PlannedRun:
    job: str
    schedule_time: datetime
    action: str

    def to_json(self) -> dict[str, str]:
        when = rfc3339(self.schedule_time)
        return {"job": self.job, "schedule_time": when, "action": self.action}


@dataclass(frozen=True)
class Plan:
    """What a backfill would run, and the times it leaves alone, by reason."""

    runs: list[PlannedRun]
    left: dict[str, int] = field(default_factory=dict)


def request_key(
    project: str, region: str, job: str, start: datetime, end: datetime, include_failed: bool
) -> str:
    """The request's document id: the same backfill asked twice is the same document."""
    canonical = "\n".join(
        ["backfill-v1", project, region, job, rfc3339(start), rfc3339(end), str(include_failed)]
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def queue_key(project: str, region: str) -> str:
    """The queue document's id: one per scope the handler serves."""
    return "queue-" + hashlib.sha256(f"{project}\n{region}".encode()).hexdigest()[:32]


def plan(
    job: JobSchedule,
    start: datetime,
    end: datetime,
    read: Callable[[Sequence[str]], Mapping[str, RunRecord]],
    project: str,
    region: str,
    include_failed: bool,
    now: datetime,
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
        reason = _left_because(present, include_failed, now)
        if reason is not None:
            left[reason] = left.get(reason, 0) + 1
            continue
        failed = any(record.status is Status.FAILED for record in present)
        action = ACTION_RERUN_FAILED if failed else ACTION_RUN
        runs.append(PlannedRun(job.id, run.schedule_time, action))
    return Plan(runs, left)


def _left_because(present: list[RunRecord], include_failed: bool, now: datetime) -> str | None:
    if any(record.status is Status.COMPLETED for record in present):
        return "completed"
    if any(
        record.status is Status.IN_PROGRESS and not may_take_over(record, now) for record in present
    ):
        return "in_progress"
    if any(record.status is Status.FAILED for record in present) and not include_failed:
        return "failed (add --include-failed to rerun)"
    return None


def request_document(
    job: str,
    start: datetime,
    end: datetime,
    include_failed: bool,
    runs: Sequence[PlannedRun],
    now: datetime,
    requested_by: str,
) -> dict[str, Any]:
    """The request as stored: its times in order, each with its action, and where it stands."""
    return {
        "job": job,
        "start": start,
        "end": end,
        "include_failed": include_failed,
        "times": [run.schedule_time for run in runs],
        "actions": [run.action for run in runs],
        "requested_at": now,
        "requested_by": requested_by,
        "status": PENDING,
        "next": 0,
        "outcomes": {},
    }


def _queue_change(docs: BackfillDocs, key: str, change: Callable[[list[str]], list[str]]) -> None:
    """Apply `change` to the queue's pending list, compare-and-set, until it sticks."""
    for _ in range(_QUEUE_ROUNDS):
        found = docs.get(key)
        if found is None:
            pending = change([])
            if not pending:
                return
            try:
                docs.create(key, {"pending": pending})
            except RecordExists:
                continue
            return
        data, version = found
        before = list(data.get("pending", []))
        after = change(before)
        if after == before:
            return
        try:
            docs.update(key, {"pending": after}, version)
        except VersionConflict:
            continue
        return
    raise StoreUnavailable(f"backfill queue {key} kept changing under concurrent writers")


def record_request(
    docs: BackfillDocs, project: str, region: str, key: str, document: Mapping[str, Any]
) -> tuple[bool, dict[str, Any]]:
    """Create the request (or find it) and make sure a pending one is queued.

    Returns whether this call created it, and the stored request. A request
    found already pending is queued again (a CLI that stopped between the two
    writes); one found done is left as it is.
    """
    created = True
    try:
        docs.create(key, document)
        stored = dict(document)
    except RecordExists:
        created = False
        found = docs.get(key)
        if found is None:
            raise StoreUnavailable(f"backfill request {key} vanished while read") from None
        stored = found[0]
    if stored.get("status") == PENDING:
        _queue_change(docs, queue_key(project, region), lambda keys: _with(keys, key))
    return created, stored


def _with(keys: list[str], key: str) -> list[str]:
    return keys if key in keys else [*keys, key]


def _without(keys: list[str], key: str) -> list[str]:
    return [item for item in keys if item != key]


@dataclass
class Tally:
    """What the audit's backfill pass did, for its summary line."""

    requests_done: int = 0
    runs: int = 0  # times taken from requests
    ran: int = 0  # of those, times whose job this pass executed
    outcomes: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # why the pass stopped early, if it did

    def count(self, outcome: str) -> None:
        self.runs += 1
        self.ran += outcome in RAN_OUTCOMES
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "requests_done": self.requests_done,
            "runs": self.runs,
            "ran": self.ran,
            "outcomes": dict(self.outcomes),
            "error": self.error,
        }


@dataclass(frozen=True)
class Runner:
    """What the audit hands the backfill pass: its ledger, the run entry and the scope."""

    ledger: Ledger
    jobs: Mapping[str, object]
    identity: Callable[[str, datetime], RunIdentity]
    run: Callable[[RunIdentity, str], str]  # App.catch_up's outcome, given a trigger
    ensure_lease: Callable[[], None]


def run_pending(docs: BackfillDocs, runner: Runner, project: str, region: str) -> Tally:
    """Run every pending request of the queue, in order; each time once, through the claim.

    A ledger that cannot be read or written stops the pass, and the tally says
    why, so the audit still logs its summary; the next audit goes on from each
    request's position.
    """
    tally = Tally()
    queue = queue_key(project, region)
    try:
        found = docs.get(queue)
        for key in [] if found is None else list(found[0].get("pending", [])):
            if _run_request(docs, runner, key, tally):
                tally.requests_done += 1
                _queue_change(docs, queue, lambda keys, key=key: _without(keys, key))
    except StoreUnavailable as exc:
        tally.error = f"{type(exc).__name__}: {exc}"
    return tally


def _run_request(docs: BackfillDocs, runner: Runner, key: str, tally: Tally) -> bool:
    """Run one request from its position; True once it is done (or gone)."""
    found = docs.get(key)
    if found is None:
        return True
    data, version = found
    if data.get("status") != PENDING:
        return True
    job, times, actions = data["job"], data["times"], data["actions"]
    outcomes: dict[str, int] = dict(data.get("outcomes", {}))
    position = int(data.get("next", 0))
    for index in range(position, len(times)):
        runner.ensure_lease()  # an audit that lost its run stops backfilling
        when = times[index].astimezone(UTC)
        outcome = _run_time(runner, job, when, actions[index], data["requested_at"])
        tally.count(outcome)
        if outcome in LEDGER_UNAVAILABLE_OUTCOMES:
            # Not run: the position stays, so the next audit tries this time again.
            tally.error = f"{outcome} at {rfc3339(when)} of request {key}"
            return False
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        try:
            version = docs.update(key, {"next": index + 1, "outcomes": outcomes}, version)
        except VersionConflict:
            return False  # another audit moved this request on: it is that audit's now
    now = runner.ledger.now()
    try:
        docs.update(key, {"status": DONE, "done_at": now, "outcomes": outcomes}, version)
    except VersionConflict:
        return False
    log_line(
        "INFO",
        f"backfill request done: {job}, {len(times)} time(s)",
        outcome="backfill_done",
        job=job,
        request=key,
        trigger=TRIGGER_BACKFILL,
        outcomes=outcomes,
    )
    return True


def _run_time(runner: Runner, job: str, when: datetime, action: str, requested_at: Any) -> str:
    """Run one time of a request through the claim; the outcome, logged with trigger backfill."""
    run = runner.identity(job, when)
    ledger = runner.ledger
    if job not in runner.jobs:
        outcome = "job_not_served"
    elif when + ledger.retention - ledger.lease <= ledger.now():
        outcome = "past_retention"  # its record would expire before the run could finish
    else:
        if action == ACTION_RERUN_FAILED:
            _release_if_failed_before(ledger, run.key, requested_at)
        outcome = runner.run(run, TRIGGER_BACKFILL)
    log_line(
        _SEVERITY.get(outcome, "INFO"),
        f"backfill run {outcome}: {job} at {rfc3339(when)}",
        outcome=f"backfill_{outcome}",
        job=job,
        schedule_time=when.isoformat(),
        run_key=run.key,
        trigger=TRIGGER_BACKFILL,
    )
    return outcome


def _release_if_failed_before(ledger: Ledger, key: str, requested_at: datetime) -> None:
    """Give a failed run back, fenced, if it failed before the request (not by this backfill)."""
    seen = ledger.read_versioned(key)
    if seen is None or seen.record.status is not Status.FAILED:
        return
    finished = seen.record.finished_at or seen.record.claimed_at
    if finished >= requested_at:
        return
    # Changed or expired since read: the claim that follows sees what it is now.
    with contextlib.suppress(ReleaseRefused):
        ledger.release_failed(key, seen, "backfill", [])
