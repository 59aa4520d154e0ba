"""How far the handler's audit has judged each job: the watermark that makes it read each run once.

Per job the audit keeps a `JobMark`: the schedule and time zone it judged
under, the job's epoch (`runledger.ledger.epochs`), `judged_to` (every schedule time
up to this instant is judged, or deliberately not run) and the runs still
`open`: those reported as a finding and not yet resolved, and those that had
settled while a live lease still covered them; and what the audit last saw of the
job in Cloud Scheduler (`seen`: when, and whether it was paused), evidence
`runledger.audit.pauses` weighs against Scheduler's audit log. A mark lost (its
shard deleted) loses only that evidence: the job's times then read as of unknown
state, reported rather than excused or caught up. The next audit reads only the
runs after `judged_to` and the open ones, so a run judged clean is never read
again, and a finding is logged once (before the write that moves past it, so
an audit that dies after that write loses none; one that dies before it, or
loses a race for it, leaves it to be logged again); the open ones are carried in the
summary line until their record says the run completed, or they leave the
look-back.

The marks of all jobs are spread over at most `SHARDS` documents, by a hash of
the job id, so an audit reads (and writes) min(jobs, SHARDS) of them: at 5,000
jobs that is 256 documents against one per scheduled run, not one per job. A
shard's document lives next to the epochs (see `AuditStore`) and is
written with the same fencing: created with exists=false, or replaced at the
`update_time` the audit read. An audit that loses that race drops what it
judged of that shard's jobs (the winner's marks stand), so a watermark never
moves backwards; both audits have logged the findings they judged. Reading the shard replaces
reading the job's epoch document while the mark still holds for the job's
schedule; a job without one (new, or rescheduled) has its epoch recorded as
before, and its mark starts over.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from runledger.exceptions import RecordExists, VersionConflict
from runledger.ledger.epochs import EpochStore, record_epochs
from runledger.schedules import JobSchedule

# Documents the marks are spread over: bounds an audit's overhead reads and writes.
SHARDS = 256
# Open runs kept per job, newest first: bounds a shard document far under
# Firestore's 1 MiB (a job failing every minute would otherwise hold 360 over 6 hours).
MAX_OPEN_PER_JOB = 100


@dataclass(frozen=True)
class OpenRun:
    """A settled run to look at again: `finding` as reported, or None (still under a live lease)."""

    instants: tuple[datetime, ...]
    finding: str | None

    def to_document(self) -> dict[str, Any]:
        return {"at": list(self.instants), "finding": self.finding}

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> OpenRun:
        return cls(tuple(document["at"]), document["finding"])


@dataclass(frozen=True)
class Sighting:
    """A job as the audits saw it in Cloud Scheduler: paused or not at `at`, the last one.

    `since`: the first of the audits that have seen it so since (None: only `at` is
    known); `before`: the last audit that saw it the other way, if one did. These are
    the instants `audit.pauses` holds the pause log to (marks written before they were
    kept have neither: `at` alone).
    """

    at: datetime
    paused: bool
    since: datetime | None = None
    before: datetime | None = None

    @property
    def first(self) -> datetime:
        return self.at if self.since is None else self.since

    def to_document(self) -> dict[str, Any]:
        return {"at": self.at, "paused": self.paused, "since": self.since, "before": self.before}

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Sighting:
        return cls(
            document["at"], document["paused"], document.get("since"), document.get("before")
        )


@dataclass(frozen=True)
class JobMark:
    """What the audit has judged of one job, as now scheduled."""

    schedule: str
    time_zone: str
    epoch: datetime
    judged_to: datetime | None  # None: nothing judged yet, the whole look-back is due
    open: tuple[OpenRun, ...] = ()
    # When an audit last listed the job in Cloud Scheduler and whether it was paused then.
    seen: Sighting | None = None

    def holds_for(self, job: JobSchedule) -> bool:
        return (self.schedule, self.time_zone) == (job.schedule, job.time_zone)

    def to_document(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule,
            "time_zone": self.time_zone,
            "epoch": self.epoch,
            "judged_to": self.judged_to,
            "open": [run.to_document() for run in self.open],
            "seen": None if self.seen is None else self.seen.to_document(),
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> JobMark:
        return cls(
            document["schedule"],
            document["time_zone"],
            document["epoch"],
            document["judged_to"],
            tuple(OpenRun.from_document(run) for run in document["open"]),
            # Marks written before sightings were kept have none.
            None if document.get("seen") is None else Sighting.from_document(document["seen"]),
        )


@dataclass(frozen=True)
class StoredShard:
    """One shard document: the marks of the jobs that hash to it, by job id, and its version."""

    marks: dict[str, JobMark]
    version: Any

    def to_document(self) -> dict[str, Any]:
        return {"jobs": {job: mark.to_document() for job, mark in self.marks.items()}}

    @classmethod
    def from_document(cls, document: Mapping[str, Any], version: Any) -> StoredShard:
        jobs = document["jobs"]
        return cls({job: JobMark.from_document(mark) for job, mark in jobs.items()}, version)


@dataclass(frozen=True)
class JobState:
    """A job's epoch for this audit and its mark, if one holds for its schedule."""

    epoch: datetime
    mark: JobMark | None


@runtime_checkable
class AuditStore(EpochStore, Protocol):
    """The audit's store: each job's epoch (`EpochStore`) and its watermark shards.

    Shards live next to the epochs, outside the run collection. This module
    decides what to write; a store only reads, creates and compare-and-sets.
    """

    def get_shards(self, keys: Sequence[str]) -> dict[str, StoredShard]:
        """The watermark shards among `keys` that exist, by key, in one round trip."""

    def create_shard(self, key: str, shard: StoredShard) -> Any:
        """Write a new shard and return its version; raise RecordExists if the key is taken."""

    def replace_shard(self, key: str, shard: StoredShard, version: Any) -> Any:
        """Overwrite the shard if still at `version`; raise VersionConflict if not (or gone)."""


def read_sighting(
    store: AuditStore, project: str, region: str, job: JobSchedule
) -> Sighting | None:
    """What the audits have seen of `job` in Scheduler, as its mark keeps it: read only."""
    key = shard_key(project, region, job.id)
    shard = store.get_shards([key]).get(key)
    mark = None if shard is None else shard.marks.get(job.id)
    return mark.seen if mark is not None and mark.holds_for(job) else None


def shard_key(project: str, region: str, job: str) -> str:
    """The id of the shard document holding `job`'s mark: fixed length, stable per job."""
    index = int(hashlib.sha256(job.encode()).hexdigest()[:8], 16) % SHARDS
    canonical = "\n".join(["watermark-v1", project, region, str(index)])
    return hashlib.sha256(canonical.encode()).hexdigest()


class LedgerMarks:
    """The marks of one audit: read once (`load`), written once, fenced (`save`)."""

    def __init__(self, store: AuditStore, project: str, region: str) -> None:
        self._store = store
        self._project = project
        self._region = region
        self._keys: dict[str, str] = {}
        self._shards: dict[str, StoredShard] = {}
        self.reads = 0  # documents read: the shards, and the epochs of jobs without a mark

    def load(
        self, schedules: Sequence[JobSchedule], now: datetime, seen: Collection[str] | None = None
    ) -> dict[str, JobState]:
        """Each job's epoch and mark; epochs are recorded (at `now`) for jobs without a mark,
        a rescheduled one only if Cloud Scheduler was `seen` to have it (`record_epochs`):
        a job left out waits for an audit that reads Scheduler."""
        self._keys = {job.id: shard_key(self._project, self._region, job.id) for job in schedules}
        wanted = sorted(set(self._keys.values()))
        self._shards = self._store.get_shards(wanted) if wanted else {}
        self.reads = len(wanted)
        marks: dict[str, JobMark] = {}
        for job in schedules:
            shard = self._shards.get(self._keys[job.id])
            mark = None if shard is None else shard.marks.get(job.id)
            if mark is not None and mark.holds_for(job):
                marks[job.id] = mark
        unmarked = [job for job in schedules if job.id not in marks]
        epochs = (
            record_epochs(self._store, self._project, self._region, unmarked, now, seen)
            if unmarked
            else {}
        )
        self.reads += len(unmarked)
        return {
            job.id: JobState(marks[job.id].epoch, marks[job.id])
            if job.id in marks
            else JobState(epochs[job.id], None)
            for job in schedules
            if job.id in marks or job.id in epochs
        }

    def save(self, marks: Mapping[str, JobMark]) -> set[str]:
        """Write the jobs' new marks, one fenced write per shard; returns the jobs whose write lost.

        Marks of other jobs in a shard (not audited now, or no longer configured) are kept.
        """
        by_shard: dict[str, dict[str, JobMark]] = {}
        for job, mark in marks.items():
            by_shard.setdefault(self._keys[job], {})[job] = mark
        lost: set[str] = set()
        for key, changed in by_shard.items():
            stored = self._shards.get(key)
            merged = StoredShard({**({} if stored is None else stored.marks), **changed}, None)
            try:
                if stored is None:
                    self._store.create_shard(key, merged)
                else:
                    self._store.replace_shard(key, merged, stored.version)
            except (RecordExists, VersionConflict):
                lost.update(changed)  # another audit wrote this shard since it was read
        return lost
