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
to run the same test on the Firestore emulator.

The clock: each delivery is judged one second after its own schedule time (as
Scheduler's delivery of that time arrives), plus whatever the test `advance`d, so
any realistic `schedule_time` is a scheduled run and nothing in a test waits for a
lease to expire (`advance(seconds=400)` ends a crashed attempt's lease). A forced
run (`gcloud scheduler jobs run`) only with `deliver(..., forced=True)`. A test
that pins the clock (`JobHarness(JOBS, now=...)`) gets the handler's own judgement
at that instant: a delivery stamped more than 10 s after it is a forced run
carrying the next scheduled time, as Scheduler sends one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from runledger.config import ALLOWED_PROJECTS_ENV, ALLOWED_REGIONS_ENV, contract_env
from runledger.delivery.identify import identify_run, scheduler_headers
from runledger.exceptions import BadRequest
from runledger.facts import SCHEDULE_HEADER
from runledger.ledger.memory_store import MemoryRunStore
from runledger.ledger.record import RunRecord
from runledger.ledger.store import RunStore
from runledger.sdk.context import RunContext
from runledger.sdk.registry import JobFn
from runledger.service.app import App

# The schedule time of every delivery that names none: a fixed instant, so a
# test's run keys do not change from one day to the next.
DEFAULT_SCHEDULE_TIME = datetime(2026, 1, 1, 2, 30, tzinfo=UTC)
# How long after its schedule time a delivery arrives, on the harness's clock.
ARRIVAL = timedelta(seconds=1)
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
    """The ledger's clock: a delivery's own time plus what the test advanced, unless pinned.

    Unpinned, `judge(T)` sets the clock to T + 1 s + the advanced total for the
    delivery of T; pinned, it stands at its start plus the advanced total.
    """

    def __init__(self, pinned: datetime | None) -> None:
        self.pinned = pinned is not None
        self._base = pinned if pinned is not None else DEFAULT_SCHEDULE_TIME + ARRIVAL
        self._advanced = timedelta(0)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._base + self._advanced

    def at(self, schedule_time: datetime) -> datetime:
        """When the delivery of `schedule_time` is judged."""
        with self._lock:
            base = self._base if self.pinned else schedule_time + ARRIVAL
            return base + self._advanced

    def judge(self, schedule_time: datetime) -> None:
        """Stand at the time the delivery of `schedule_time` is judged."""
        with self._lock:
            if not self.pinned:
                self._base = schedule_time + ARRIVAL

    def advance(self, delta: timedelta) -> None:
        with self._lock:
            self._advanced += delta


class JobHarness:
    """Your JOBS behind the real handler logic and ledger, one `deliver` per Scheduler call."""

    def __init__(
        self,
        jobs: Mapping[str, JobFn],
        *,
        store: RunStore | None = None,
        env: Mapping[str, str] | None = None,
        now: datetime | None = None,
    ) -> None:
        """`env` takes the handler's DEDUP_* settings as deployed, DEDUP_SCHEDULES included.

        `now` pins the clock at that instant (it then moves only with `advance`);
        without it each delivery is judged at its own schedule time (module docstring).

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
        """Move the clock on for every later delivery: `advance(seconds=400)` ends a lease."""
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
        forced: bool = False,
    ) -> Delivery:
        """One Scheduler delivery of `job`'s run at `schedule_time`, carrying `body`.

        `forced`: a forced run made at `schedule_time`, which Scheduler sends without
        a ScheduleTime; the handler keys it as a run of its own (DEDUP_MANUAL_RUNS).
        """
        raw = body.encode() if isinstance(body, str) else body
        headers = self.headers(job, schedule_time)
        if forced:
            headers = [(name, value) for name, value in headers if name != SCHEDULE_HEADER]
        self.clock.judge(schedule_time)
        before = len(self.calls)
        response = self.app.handle("POST", headers, raw)
        return Delivery(
            status=response.status,
            outcome=response.outcome,
            message=response.message,
            ran=len(self.calls) > before,
            record=self._record(headers, self.clock()),
        )

    def record(self, job: str, schedule_time: datetime = DEFAULT_SCHEDULE_TIME) -> RunRecord | None:
        """The ledger record of `job`'s scheduled run at `schedule_time`, or None."""
        return self._record(self.headers(job, schedule_time), self.clock.at(schedule_time))

    def _record(self, headers: list[tuple[str, str]], now: datetime) -> RunRecord | None:
        try:
            run = identify_run(headers, self.app.settings, self.app.jobs, now)
        except BadRequest:  # a delivery the handler refuses has no run
            return None
        current = self._store.get(run.key)
        return None if current is None else current.record

    def executions(self, job: str) -> int:
        """How many times `job`'s function was called so far, over all its runs."""
        return sum(ctx.job_name == job for ctx in self.calls)
