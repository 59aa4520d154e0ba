"""What a job function receives: the run's identity and a view of its lease."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from runledger.exceptions import LeaseLost
from runledger.lease import LeaseKeeper


@dataclass(frozen=True)
class RunContext:
    """Pass `run_id` downstream as an idempotency token: it is the same on every retry."""

    run_id: str
    job_name: str
    schedule_time: datetime
    attempt_id: str
    project: str
    region: str
    manual: bool
    body: bytes
    _lease: LeaseKeeper = field(repr=False)

    def lease_held(self) -> bool:
        return self._lease.held()

    def ensure_lease(self) -> None:
        """Call between steps of long work: raises LeaseLost once another attempt took over."""
        if not self._lease.held():
            raise LeaseLost(f"attempt {self.attempt_id} lost its lease on run {self.run_id}")
