"""The audit's epoch per job: the instant from which a job, as now scheduled, is judged.

A job's schedule times before its deploy were never meant to run. Without an
epoch the first audits after a fresh deploy would report the whole look-back
as missed for every job, and catch-up would run those times; so would a new
job, and a changed schedule or time zone (the new schedule's times before the
change). So the handler's audit records, per job, the schedule and time zone
it saw and the instant it first saw them, and judges only schedule times at or
after that instant.

One epoch document per (project, region, job), kept out of the run collection
(see `EpochStore`), so run listings never show it. The first audit that
sees a job creates its document with exists=false: concurrent audits agree on
one epoch, since one create wins and the others read it. An audit that finds
a different schedule or time zone there (a changed schedule, or a rollback to
an earlier one) replaces the document at the version it read, with the epoch
set to now. Every other write moves an epoch to "now" (or back to what it
was, below), so a lost or contended epoch only ever narrows what is judged,
never reports a run that was not due. Writing needs only the
`datastore.entities.create` and `update` the handler already has; the operator
CLI only reads.

Each write also keeps the epoch's lasting copy, in the same commit, where a
delete of the audit's working documents (`runledger_audit`) does not reach
(`EpochStore.get_lasting_epochs`). An audit that finds a job's epoch gone reads
the copy, and if it holds for the job's schedule writes the epoch back as it
was: the audit's watermarks, gone with it, then start again from that epoch,
so the times due before the deletion and not yet judged are judged (docs/audit.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from runledger.exceptions import RecordExists, VersionConflict
from runledger.schedules import JobSchedule

# Rounds of read-then-write while other audits keep changing one job's epoch
# (only two handler revisions with different schedules do that, during a deploy).
_ROUNDS = 3


@dataclass(frozen=True)
class AuditEpoch:
    """A job's schedule and time zone as an audit saw them, and since when (`since`)."""

    job: str
    schedule: str
    time_zone: str
    since: datetime

    def holds_for(self, job: JobSchedule) -> bool:
        """Whether this epoch was recorded for the job's current schedule and time zone."""
        return (self.job, self.schedule, self.time_zone) == (job.id, job.schedule, job.time_zone)

    def to_document(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "schedule": self.schedule,
            "time_zone": self.time_zone,
            "epoch": self.since,
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> AuditEpoch:
        return cls(document["job"], document["schedule"], document["time_zone"], document["epoch"])


@dataclass(frozen=True)
class StoredEpoch:
    epoch: AuditEpoch
    version: Any


class EpochStore(Protocol):
    """Where the audit keeps each job's epoch: next to the runs, never among them.

    Epochs live outside the run collection, so run listings and queries never
    see them, and no TTL policy applies to them. This module decides what to
    write; a store only reads, creates and compare-and-sets.
    """

    def get_epochs(self, keys: Sequence[str]) -> dict[str, StoredEpoch]:
        """The epochs among `keys` that exist, by key, in one round trip."""

    def get_lasting_epochs(self, keys: Sequence[str]) -> dict[str, AuditEpoch]:
        """The lasting copies among `keys` that exist, by key, in one round trip."""

    def create_epoch(self, key: str, epoch: AuditEpoch) -> Any:
        """Write a new epoch and its lasting copy in one commit; return the epoch's version.

        Raise RecordExists if the key is taken; then neither is written.
        """

    def replace_epoch(self, key: str, epoch: AuditEpoch, version: Any) -> Any:
        """Overwrite the epoch and its lasting copy in one commit if still at `version`.

        Raise VersionConflict if not (or gone); then neither is written.
        """


def epoch_key(project: str, region: str, job: str) -> str:
    """The epoch document's id: fixed length, whatever the job id (run keys hash the same scope)."""
    canonical = "\n".join(["epoch-v1", project, region, job])
    return hashlib.sha256(canonical.encode()).hexdigest()


def read_epochs(
    store: EpochStore, project: str, region: str, schedules: Sequence[JobSchedule]
) -> dict[str, datetime]:
    """Each job's epoch, if one is on record for its current schedule and time zone.

    Reads only (a batch get, and one of the lasting copies of the epochs gone): a job
    without an epoch is judged over the whole window.
    """
    keys = {job.id: epoch_key(project, region, job.id) for job in schedules}
    found = {key: stored.epoch for key, stored in store.get_epochs(list(keys.values())).items()}
    gone = [key for key in keys.values() if key not in found]
    found.update(store.get_lasting_epochs(gone) if gone else {})
    return {
        job.id: epoch.since
        for job in schedules
        if (epoch := found.get(keys[job.id])) is not None and epoch.holds_for(job)
    }


def record_epochs(
    store: EpochStore,
    project: str,
    region: str,
    schedules: Sequence[JobSchedule],
    now: datetime,
    seen: Collection[str] | None = None,
) -> dict[str, datetime]:
    """Every job's epoch, recording `now` for each job seen first or with a new schedule.

    `seen`: the jobs Cloud Scheduler was seen to have with their schedule now (None:
    every job, when there is no Scheduler to ask). A job whose schedule changed is left
    out unless seen: during a deploy the handler's new revision has the new schedule
    before Scheduler does, and an epoch recorded then, unread, would judge the new
    schedule's times Scheduler never sent (seed 36 of the simulator's `deploy_in_flight`,
    the listing unread while the revision rolled out). A job on record for no schedule
    is new: its times before Scheduler created it read as not due from the CreateJob
    (`audit.pause_log`), so its epoch is recorded as before.
    """
    keys = {job.id: epoch_key(project, region, job.id) for job in schedules}
    found = store.get_epochs(list(keys.values()))
    gone = [key for key in keys.values() if key not in found]
    lasting = store.get_lasting_epochs(gone) if gone else {}
    epochs = {}
    for job in schedules:
        key = keys[job.id]
        held = [e for e in (getattr(found.get(key), "epoch", None), lasting.get(key)) if e]
        changed = bool(held) and not any(epoch.holds_for(job) for epoch in held)
        if seen is not None and job.id not in seen and changed:
            continue
        epochs[job.id] = _settle(store, key, job, found.get(key), lasting.get(key), now)
    return epochs


def _settle(
    store: EpochStore,
    key: str,
    job: JobSchedule,
    stored: StoredEpoch | None,
    lasting: AuditEpoch | None,
    now: datetime,
) -> datetime:
    # A deleted epoch comes back as it was, from its lasting copy, if it holds for the job.
    if lasting is not None and lasting.holds_for(job):
        fresh = lasting
    else:
        fresh = AuditEpoch(job.id, job.schedule, job.time_zone, now)
    for _ in range(_ROUNDS):
        if stored is not None and stored.epoch.holds_for(job):
            return stored.epoch.since
        try:
            if stored is None:
                store.create_epoch(key, fresh)
            else:
                store.replace_epoch(key, fresh, stored.version)
        except (RecordExists, VersionConflict):
            stored = store.get_epochs([key]).get(key)  # another audit wrote first: look again
            continue
        return fresh.since
    # Still contended: judging from now is what any writer would have recorded.
    return now
