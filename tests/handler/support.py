"""Test doubles for time and IDs, and a factory for apps on a given store."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta

from runledger.app import App
from runledger.config import Settings
from runledger.jobs import JobFn
from runledger.store import RunStore

T0 = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)


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


def settings(**env: str) -> Settings:
    base = {"DEDUP_LEASE_SECONDS": "300", "DEDUP_RETENTION_SECONDS": "86400"}
    return Settings.from_env(base | env)


def make_app(
    store: RunStore,
    jobs: Mapping[str, JobFn],
    clock: FakeClock,
    **env: str,
) -> App:
    return App(settings(**env), jobs, lambda: store, clock=clock, new_attempt_id=sequential_ids())


def scheduler_headers(
    job: str = "nightly-report",
    schedule_time: str = "2026-10-16T12:00:00Z",
    project: str = "acme-prod",
    region: str = "europe-west1",
    **extra: str,
) -> list[tuple[str, str]]:
    headers = [
        ("X-CloudScheduler-JobName", job),
        ("X-CloudScheduler-ScheduleTime", schedule_time),
        ("X-Dedup-Project", project),
        ("X-Dedup-Region", region),
    ]
    return headers + [(name.replace("_", "-"), value) for name, value in extra.items()]
