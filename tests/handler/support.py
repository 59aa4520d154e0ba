"""Test doubles for time and IDs, and factories for apps, ledgers and records on a given store.

The handler tests and the work tests (checkpoints, outputs, ops) build the same
ledger, records and deliveries; they come from here so the lease, retention and
default delivery every test assumes are stated once.
"""

from __future__ import annotations

import io
import itertools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from runledger.audit.pause_log import StateChange
from runledger.audit.scheduler_state import Lister, LiveJob
from runledger.backfill.queue import BackfillDocs
from runledger.config import Settings, contract_env
from runledger.delivery.identify import identify_run
from runledger.delivery.identify import scheduler_headers as delivery_headers
from runledger.exceptions import SchedulerUnreadable
from runledger.ledger.machine import MAX_CLOCK_SKEW, Ledger
from runledger.ledger.record import RunRecord, Status
from runledger.ledger.store import RunStore
from runledger.ops.cli import main
from runledger.schedules import AuditSettings
from runledger.sdk.registry import JobFn
from runledger.service.app import App, Response, dead_letters
from tests.stacks import HANDLER_DIR

T0 = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)
# The lease and retention of every test app (`settings()`) and ledger (`make_ledger`).
LEASE = timedelta(minutes=5)
RETENTION = timedelta(days=1)


class FakeScheduler:
    """Cloud Scheduler as the audit's lister sees it: each job's state and its audit log.

    `pause` and `resume` script a console call at an instant; a listing at the
    clock's time shows each job as those calls left it and gives the calls
    between the instant asked for and now, unless `log_unread` says why the
    log cannot be read.
    """

    def __init__(self, clock: Callable[[], datetime], **jobs: str) -> None:
        """`jobs`: job id -> its cron line (UTC), each enabled until a scripted pause."""
        self._clock = clock
        self.schedules = dict(jobs)
        self.calls: list[tuple[str, StateChange]] = []
        self.unlogged: set[StateChange] = set()  # calls whose log entry has not arrived yet
        self.log_unread: str | None = None

    def pause(self, job: str, at: datetime, logged: bool = True) -> FakeScheduler:
        self.calls.append((job, StateChange(at, True)))
        if not logged:
            self.unlogged.add(StateChange(at, True))
        return self

    def resume(self, job: str, at: datetime) -> FakeScheduler:
        self.calls.append((job, StateChange(at, False)))
        return self

    def __call__(self, since: datetime) -> dict[str, LiveJob]:
        now = self._clock()
        listed: dict[str, LiveJob] = {}
        for job, schedule in self.schedules.items():
            made = sorted((c for name, c in self.calls if name == job and c.at <= now), key=_at)
            paused = bool(made) and made[-1].paused
            if self.log_unread is not None:
                listed[job] = LiveJob(job, paused, schedule, "UTC", history_unread=self.log_unread)
                continue
            logged = tuple(c for c in made if c.at >= since and c not in self.unlogged)
            listed[job] = LiveJob(job, paused, schedule, "UTC", logged, since)
        return listed


def _at(change: StateChange) -> datetime:
    return change.at


def unreadable(reason: str) -> Lister:
    """A lister whose Scheduler refuses every listing, for `reason`."""

    def listing(since: datetime) -> dict[str, LiveJob]:
        raise SchedulerUnreadable(reason)

    return listing


class FakeClock:
    """A clock the test moves by hand: nothing sleeps to let a lease run out."""

    def __init__(self, start: datetime = T0 + timedelta(seconds=1)) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, **delta: float) -> None:
        with self._lock:
            self._now += timedelta(**delta)


def sequential_ids(prefix: str = "attempt") -> Callable[[], str]:
    counter = itertools.count(1)
    lock = threading.Lock()

    def next_id() -> str:
        with lock:
            return f"{prefix}-{next(counter)}"

    return next_id


class DrivenRenewals:
    """Lease renewals that run only when the test says so, on the test's own thread.

    The App and LeaseKeeper take any `Renewals`; with this one, nothing renews
    behind a test's back, and `run_due()` stands in for the timer firing.
    """

    def __init__(self) -> None:
        self._pending: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def after(self, delay_s: float, renew: Callable[[], None]) -> None:
        with self._lock:
            self._pending.append(renew)

    def run_due(self) -> int:
        """Run every renewal scheduled so far, as if its time had come; return how many.

        A renewal that schedules the next one leaves it for the next call.
        """
        with self._lock:
            due, self._pending = self._pending, []
        for renew in due:
            renew()
        return len(due)


# The stack and ledger the operator CLI tests (`python -m runledger.ops`, in process) use.
OPS_SCOPE = {"DEDUP_ALLOWED_PROJECTS": "acme-prod", "DEDUP_ALLOWED_REGIONS": "europe-west1"}


def ops_env(emulator: Any, **more: str) -> dict[str, str]:
    """The handler's settings as an operator exports them, the emulator as the ledger."""
    return (
        emulator.env()
        | OPS_SCOPE
        | {
            "DEDUP_LEASE_SECONDS": str(int(LEASE.total_seconds())),
            "DEDUP_RETENTION_SECONDS": str(int(RETENTION.total_seconds())),
        }
        | more
    )


def ops_at(env: Mapping[str, str], now: datetime, *args: str) -> tuple[int, str, str]:
    """`runledger.ops` with `args` at `now`: its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), env=dict(env), clock=lambda: now, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def settings(**env: str) -> Settings:
    base = {
        "DEDUP_LEASE_SECONDS": str(int(LEASE.total_seconds())),
        "DEDUP_RETENTION_SECONDS": str(int(RETENTION.total_seconds())),
    }
    return Settings.from_env(base | env)


def make_app(
    store: RunStore,
    jobs: Mapping[str, JobFn],
    clock: FakeClock,
    renewals: DrivenRenewals | None = None,
    audit: AuditSettings | None = None,
    live: Lister | None = None,
    backfills: Callable[[], BackfillDocs] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    **env: str,
) -> App:
    """An app whose leases renew only when the test runs `renewals.run_due()`.

    With `audit`, it serves the audit job as `App.from_env` does (`live`: the jobs' live
    state; `backfills`: the backfill requests its audit runs). DEDUP_DEAD_LETTER_TOPIC in
    `env` publishes its final failures to Pub/Sub, as `App.from_env` does.
    """
    config = settings(**env)
    return App(
        config,
        jobs,
        lambda: store,
        clock=clock,
        new_attempt_id=sequential_ids(),
        renewals=DrivenRenewals() if renewals is None else renewals,
        audit=audit,
        live=live,
        backfills=backfills,
        monotonic=monotonic,
        dead_letters=dead_letters(config, None),
    )


def scheduler_headers(
    job: str = "nightly-report",
    schedule_time: str = "2026-10-16T12:00:00Z",
    project: str = "acme-prod",
    region: str = "europe-west1",
    **extra: str,
) -> list[tuple[str, str]]:
    headers = delivery_headers(job, schedule_time, project, region)
    return headers + [(name.replace("_", "-"), value) for name, value in extra.items()]


def deliver(
    app: App,
    headers: list[tuple[str, str]] | None = None,
    method: str = "POST",
    body: bytes = b"",
) -> Response:
    """One delivery to the app, by default the Scheduler's call of `scheduler_headers()`."""
    return app.handle(method, scheduler_headers() if headers is None else headers, body)


def default_run_key(app: App) -> str:
    """The run key the app gives the default delivery (`scheduler_headers()`) right now."""
    return identify_run(scheduler_headers(), app.settings, app.jobs, app.ledger.now()).key


def make_ledger(
    store: RunStore,
    clock: Callable[[], datetime],
    *,
    lease: timedelta = LEASE,
    new_attempt_id: Callable[[], str] | None = None,
) -> Ledger:
    """A ledger as the test app builds one: LEASE, RETENTION, attempts numbered from 1."""
    return Ledger(
        store,
        lease=lease,
        retention=RETENTION,
        clock=clock,
        new_attempt_id=new_attempt_id or sequential_ids(),
    )


def run_record(
    attempt_id: str = "a1", status: Status = Status.IN_PROGRESS, **fields: Any
) -> RunRecord:
    """A valid record of the default run claimed at T0; `fields` override any other field."""
    values: dict[str, Any] = {
        "lease_expires": T0 + LEASE,
        "expire_at": T0 + RETENTION,
        "job": "nightly-report",
        "schedule_time": T0,
        "project": "acme-prod",
        "region": "europe-west1",
        "manual": False,
        "attempts": 1,
        "claimed_at": T0,
    }
    return RunRecord(status=status, attempt_id=attempt_id, **(values | fields))


class Takeover:
    """A job's first attempt stalls past its lease while a retry takes the run over.

    The job calls `hold(ctx)` where it should stall; `run_until_late_answer` then
    drives the two deliveries so that the late attempt answers while the newer one
    is still inside its work, and `finish` lets the newer one complete. What each
    test checks in between (the ledger record, the work items) stays in the test.
    """

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.stalled, self.resume, self.takeover_inside, self.takeover_done = (
            threading.Event() for _ in range(4)
        )
        self.answers: dict[str, Response] = {}
        self._newer: threading.Thread | None = None

    def hold(self, ctx: Any) -> bool:
        """Stall the first attempt until released; hold the newer one inside its work.

        Returns whether `ctx` is the first (stalled, by then late) attempt.
        """
        if ctx.attempt_id == "attempt-1":
            self.stalled.set()
            self.resume.wait(60)
            return True
        self.takeover_inside.set()
        self.takeover_done.wait(60)
        return False

    def run_until_late_answer(self, app: App) -> Response:
        """Deliver, let the lease run out, deliver again, then let the late attempt answer."""
        first = threading.Thread(target=lambda: self.answers.setdefault("late", deliver(app)))
        first.start()
        assert self.stalled.wait(60)
        self.clock.advance(seconds=(app.settings.lease + MAX_CLOCK_SKEW).total_seconds())
        self._newer = threading.Thread(
            target=lambda: self.answers.setdefault("newer", deliver(app))
        )
        self._newer.start()
        assert self.takeover_inside.wait(60)
        self.resume.set()
        first.join(60)
        return self.answers["late"]

    def finish(self) -> Response:
        """Let the newer attempt end its work and return its answer."""
        assert self._newer is not None, "call run_until_late_answer first"
        self.takeover_done.set()
        self._newer.join(60)
        return self.answers["newer"]


def start_main(**env: str) -> subprocess.CompletedProcess[str]:
    """Import the deployed entry point (`handler/main.py`) in a fresh process, as Cloud Run does.

    `env` is added to this process's environment (and the program's contract version,
    unless `env` sets it); the result carries the exit status and the one line a bad
    setting prints.
    """
    return subprocess.run(
        [sys.executable, "-c", "import main"],
        cwd=HANDLER_DIR,
        env=os.environ | {"PYTHONWARNINGS": "ignore"} | contract_env() | env,
        capture_output=True,
        text=True,
        timeout=180,
    )
