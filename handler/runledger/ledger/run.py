"""A run's identity, the claim that proves an attempt holds it, and what else a claim answers.

`ledger.machine` makes these; the delivery pipeline (`delivery.pipeline`) answers
each kind once, whatever started the run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from runledger.facts import TRIGGER_SCHEDULED
from runledger.ledger.record import RunRecord, Status


@dataclass(frozen=True)
class RunIdentity:
    """What makes two deliveries the same run; `key` is its fixed-length hash."""

    key: str
    job: str
    schedule_time: datetime
    project: str
    region: str
    manual: bool
    # What starts this attempt (facts.TRIGGERS); it goes to the record and the log lines.
    trigger: str = TRIGGER_SCHEDULED
    # 0: the time's own run; N: its Nth rerun (`backfill --only all`), keyed apart
    # (`delivery.identify.generation_key`).
    generation: int = 0
    # The region whose Scheduler sent this delivery; None for a run the audit starts.
    # `region` is the region the keys hash (`Settings.key_region`): in a stack of
    # several regions the same for every region's delivery of one time.
    delivered_region: str | None = None


@dataclass(frozen=True)
class Claim:
    """Proof that this attempt holds the run, valid while `version` is current.

    `record` is the run's record as this attempt's last write left it: each fenced
    write of a job with an overlap policy copies it whole into the job's slot.
    """

    identity: RunIdentity
    record: RunRecord
    version: Any

    @property
    def attempt_id(self) -> str:
        return self.record.attempt_id

    @property
    def lease_expires(self) -> datetime:
        return self.record.lease_expires

    @property
    def attempts(self) -> int:
        return self.record.attempts


@dataclass(frozen=True)
class Duplicate:
    """The run is done, failed or held by another attempt: do not run the work."""

    status: Status
    record: RunRecord


@dataclass(frozen=True)
class Yielded:
    """The run was not claimed: another run of its job (`holder_key`) is in progress.

    record: the `skipped` record written (skip), or None (delay, or a run the audit
    started, which waits for a later audit: nothing written).
    """

    policy: str
    holder_key: str
    holder: RunRecord
    record: RunRecord | None


ClaimResult = Claim | Duplicate | Yielded


def fresh_record(
    run: RunIdentity, attempt_id: str, now: datetime, lease_expires: datetime, expire_at: datetime
) -> RunRecord:
    """A first attempt's in_progress record; a takeover counts its attempts on from the old one."""
    return RunRecord(
        status=Status.IN_PROGRESS,
        attempt_id=attempt_id,
        lease_expires=lease_expires,
        expire_at=expire_at,
        job=run.job,
        schedule_time=run.schedule_time,
        project=run.project,
        region=run.region,
        manual=run.manual,
        attempts=1,
        claimed_at=now,
        trigger=run.trigger,
        generation=run.generation,
        delivered_region=run.delivered_region,
    )


def skipped_record(
    run: RunIdentity, attempt_id: str, now: datetime, expire_at: datetime, holder_key: str
) -> RunRecord:
    """A run deliberately not run (overlap: skip): final at once, naming the run it yielded to."""
    return replace(
        fresh_record(run, attempt_id, now, now, expire_at),
        status=Status.SKIPPED,
        finished_at=now,
        yielded_to=holder_key,
    )


def suspended_record(
    run: RunIdentity, attempt_id: str, now: datetime, expire_at: datetime, note: str
) -> RunRecord:
    """A run deliberately not run (its job suspended): final at once, with the suspension's why."""
    return replace(
        fresh_record(run, attempt_id, now, now, expire_at),
        status=Status.SUSPENDED,
        finished_at=now,
        error=note,
    )
