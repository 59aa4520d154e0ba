"""Test your jobs through the real run ledger: what Scheduler's retries and duplicates do to them.

    from runledger.testing import JobHarness
    from jobs import JOBS

    def test_nightly_report_runs_once_when_delivered_twice():
        harness = JobHarness(JOBS)
        first = harness.deliver("nightly-report")
        again = harness.deliver("nightly-report")
        assert (first.outcome, first.ran) == ("completed", True)
        assert (again.outcome, again.ran) == ("duplicate_completed", False)

Each `deliver` goes through the same `App.handle` the deployed handler runs:
the run is keyed from Scheduler's headers, claimed in the ledger, your job is
called with a real `RunContext` (checkpoints, outputs, lease), and the outcome
is recorded. Deliveries of one job at one schedule time are one run, so a
second `deliver` is Scheduler's retry or duplicate of the first.

By default the ledger lives in memory (`MemoryRunStore`, which passes the same
contract tests as Firestore); pass `store=FirestoreRunStore(client, collection)`
to run the same test on the Firestore emulator. The harness's clock stands
still unless you `advance` it, so nothing in a test waits for a lease to expire.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from runledger.config import ALLOWED_PROJECTS_ENV, ALLOWED_REGIONS_ENV, contract_env
from runledger.delivery.app import App
from runledger.delivery.identify import identify_run, scheduler_headers
from runledger.exceptions import BadRequest
from runledger.ledger.memory_store import MemoryRunStore
from runledger.ledger.record import RunRecord
from runledger.ledger.store import RunStore
from runledger.sdk.context import RunContext
from runledger.sdk.registry import JobFn

# The schedule time of every delivery that names none: a fixed instant, so a
# test's run keys do not change from one day to the next.
DEFAULT_SCHEDULE_TIME = datetime(2026, 1, 1, 2, 30, tzinfo=UTC)
PROJECT = "test-project"
REGION = "test-region"


@dataclass(frozen=True)
class Delivery:
    """What one delivery did: the answer Scheduler gets, and whether your job was called."""

    status: int
    outcome: str
    message: str
    # True when this delivery called your job function (the ledger let it run).
    ran: bool
    # The run's ledger record after this delivery (None if it was refused before a claim).
    record: RunRecord | None


class _Clock:
    """Stands still until the test moves it: lease expiry without sleeping."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> None:
        with self._lock:
            self._now += delta


class JobHarness:
    """Your JOBS behind the real handler logic and ledger, one `deliver` per Scheduler call."""

    def __init__(
        self,
        jobs: Mapping[str, JobFn],
        *,
        store: RunStore | None = None,
        env: Mapping[str, str] | None = None,
        now: datetime = DEFAULT_SCHEDULE_TIME + timedelta(seconds=1),
    ) -> None:
        """`env` takes the handler's DEDUP_* settings as deployed, DEDUP_SCHEDULES included.

        The app is built as the handler builds itself (`App.from_env`), so a job's
        overlap policy, time zone and body apply here as in production. Deliveries
        carry DEDUP_ALLOWED_PROJECTS' and _REGIONS' one value (default: PROJECT, REGION);
        the contract version is this handler's unless `env` sets it.
        """
        self._store = store if store is not None else MemoryRunStore()
        self._calls: list[RunContext] = []
        self._calls_lock = threading.Lock()
        self.clock = _Clock(now)
        self.app = App.from_env(
            {ALLOWED_PROJECTS_ENV: PROJECT, ALLOWED_REGIONS_ENV: REGION, **contract_env()}
            | dict(env or {}),
            jobs={job_id: self._observed(fn) for job_id, fn in jobs.items()},
            store_factory=lambda: self._store,
            clock=self.clock,
        )

    def _observed(self, fn: JobFn) -> JobFn:
        def call(ctx: RunContext) -> Any:
            with self._calls_lock:
                self._calls.append(ctx)
            return fn(ctx)

        return call

    @property
    def calls(self) -> list[RunContext]:
        """The context of every call of any job so far, in order."""
        with self._calls_lock:
            return list(self._calls)

    def advance(self, **delta: float) -> None:
        """Move the ledger's clock: `advance(seconds=400)` ends a crashed attempt's lease."""
        self.clock.advance(timedelta(**delta))

    def headers(
        self, job: str, schedule_time: datetime = DEFAULT_SCHEDULE_TIME
    ) -> list[tuple[str, str]]:
        """What Cloud Scheduler sends for `job` at `schedule_time`, as the program configures it."""
        settings = self.app.settings
        project = min(settings.allowed_projects, default=PROJECT)
        region = min(settings.allowed_regions, default=REGION)
        return scheduler_headers(
            job,
            schedule_time,
            project,
            region,
            project_header=settings.project_header,
            region_header=settings.region_header,
        )

    def deliver(
        self,
        job: str,
        *,
        schedule_time: datetime = DEFAULT_SCHEDULE_TIME,
        body: bytes | str = b"",
    ) -> Delivery:
        """One Scheduler delivery of `job`'s run at `schedule_time`, carrying `body`."""
        raw = body.encode() if isinstance(body, str) else body
        headers = self.headers(job, schedule_time)
        before = len(self.calls)
        response = self.app.handle("POST", headers, raw)
        return Delivery(
            status=response.status,
            outcome=response.outcome,
            message=response.message,
            ran=len(self.calls) > before,
            record=self.record(job, schedule_time),
        )

    def record(self, job: str, schedule_time: datetime = DEFAULT_SCHEDULE_TIME) -> RunRecord | None:
        """The ledger record of `job`'s run at `schedule_time`, or None if there is none."""
        headers = self.headers(job, schedule_time)
        try:
            run = identify_run(headers, self.app.settings, self.app.jobs, self.clock())
        except BadRequest:  # a delivery the handler refuses has no run
            return None
        current = self._store.get(run.key)
        return None if current is None else current.record

    def executions(self, job: str) -> int:
        """How many times `job`'s function was called so far, over all its runs."""
        return sum(ctx.job_name == job for ctx in self.calls)
