"""A seed's stack in two regions, one of them out for a while: the `region_outage` class.

Each region has its own Cloud Scheduler, firing every job at the same instants,
and its own handler revision, built from the environment the program sets for
that region (`Settings` with the region's allow-list, the first region as the
key region, both regions listed: `ScheduleConfig.handler_env`): both regions'
deliveries of a time are one run. One region goes out for a minute to two hours,
in one of four ways, while the other goes on: its Scheduler stops sending (and
its jobs cannot be listed), its function answers 503, its function works but
its answers never arrive (a timeout: Scheduler retries), or its instances lose
the store. Both regions' deliveries of every time also meet at the same instant,
the race the ledger's create settles. The audit lists each region's Scheduler
through the world's REST answers (`scheduler_api.SchedulerApi`), as deployed.

Every draw comes from generators of their own (the seed's outages, the second
region's Scheduler and its listing), so a seed drawn in one region plays exactly
as it does with the class off.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from runledger.config import Settings
from runledger.exceptions import StoreUnavailable
from scheduler_dedup.localrun.simulation.scheduler import CloudScheduler, LiveJob

SECOND_REGION = "europe-west4"
KINDS = ("scheduler", "5xx", "timeout", "store")
# How long one outage lasts: a minute to two hours.
LENGTHS_S = (60, 600, 1800, 3600, 7200)
# The share of seeds (with the class on) whose stack runs in two regions.
TWO_REGION_SHARE = 0.5


@dataclass(frozen=True)
class RegionOutage:
    region: str
    kind: str  # one of KINDS
    start: datetime
    end: datetime

    def covers(self, region: str, kind: str, at: datetime) -> bool:
        return self.region == region and self.kind == kind and self.start <= at < self.end


def rng(seed: int, what: str) -> random.Random:
    """The class's generator for `what`: no draw of the seed's other classes moves."""
    return random.Random(f"{seed}-region-outage-{what}")


def draw(
    seed: int, first: str, start: datetime, end: datetime
) -> tuple[tuple[str, ...], tuple[RegionOutage, ...]]:
    """The seed's regions and its outages, all in one region, so the other stays healthy."""
    draws = rng(seed, "draw")
    if draws.random() >= TWO_REGION_SHARE:
        return (first,), ()
    regions = (first, SECOND_REGION)
    down = draws.choice(regions)
    span = max(0, int((end - start).total_seconds()) - 600)
    outages = []
    at = start + timedelta(seconds=draws.randint(0, span))
    for _ in range(draws.randint(1, 2)):
        length = timedelta(seconds=draws.choice(LENGTHS_S))
        outages.append(RegionOutage(down, draws.choice(KINDS), at, at + length))
        at += length + timedelta(seconds=draws.randint(60, 1800))
    return regions, tuple(outages)


def region_settings(settings: Settings, regions: tuple[str, ...], region: str) -> Settings:
    """`region`'s handler settings, as the program writes them (`ScheduleConfig.handler_env`)."""
    if len(regions) < 2:
        return settings
    return replace(
        settings,
        allowed_regions=frozenset({region}),
        key_region=regions[0],
        regions=frozenset(regions),
    )


class RegionStore:
    """One region's view of the store: every call fails while that region has lost it."""

    def __init__(self, inner: Any, region: str, lost: Callable[[str], bool]) -> None:
        self._inner = inner
        self._region = region
        self._lost = lost

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._lost(self._region):
                raise StoreUnavailable(f"simulated: {self._region}'s instances lost the store")
            return method(*args, **kwargs)

        return call


@dataclass(frozen=True)
class _Refused:
    status_code: int = 503

    def json(self) -> dict[str, Any]:
        return {}


class RegionApi:
    """One region's Scheduler and Logging REST answers (`SchedulerApi`), 503 while it is out."""

    def __init__(self, api: Any, down: Callable[[], bool]) -> None:
        self._api = api
        self._down = down

    def get(self, url: str, params: dict[str, str], timeout: float) -> Any:
        return _Refused() if self._down() else self._api.get(url, params, timeout)

    def post(self, url: str, json: dict[str, Any], timeout: float) -> Any:
        return _Refused() if self._down() else self._api.post(url, json, timeout)


class AllRegions:
    """Every region's Scheduler, as the operator and the stack act on them.

    A console pause or edit and a deploy change the job in every region (the stack
    deploys every region's jobs; an operator acting in one region only is drift the
    audit reports, tested in tests/audit); a forced run is one region's (the first).
    """

    def __init__(self, schedulers: dict[str, CloudScheduler]) -> None:
        self.by_region = schedulers
        self.first = next(iter(schedulers.values()))

    @property
    def jobs(self) -> dict[str, LiveJob]:
        return self.first.jobs

    def add(self, job: LiveJob, start: datetime, end: datetime) -> None:
        for scheduler in self.by_region.values():
            copy = LiveJob(job.id, job.schedule, job.time_zone, job.deadline, job.retry)
            copy.changes = list(job.changes)  # `deploy_in_flight`: its log so far
            scheduler.add(job if scheduler is self.first else copy, start, end)

    def set_paused(self, job_id: str, paused: bool, at: datetime) -> None:
        for scheduler in self.by_region.values():
            scheduler.set_paused(job_id, paused, at)

    def edit(self, job_id: str, schedule: str, end: datetime) -> None:
        for scheduler in self.by_region.values():
            scheduler.edit(job_id, schedule, end)

    def remove(self, job_id: str) -> None:
        for scheduler in self.by_region.values():
            scheduler.remove(job_id)

    def force(self, job_id: str, stamped: bool) -> None:
        self.first.force(job_id, stamped)
