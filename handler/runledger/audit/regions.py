"""A schedule sent from several regions: each region's Scheduler listed, one live state per job.

In a stack of several regions (DEDUP_REGIONS) every region's Scheduler holds
every job and sends every time; the ledger makes them one run, so a time is
missed only if no region ran it. The audit therefore lists each region's
Scheduler and judges a job's runs by a region that still sends them as
deployed: a job paused, edited or deleted in one region's Scheduler only is one
`drifted` finding naming that region (the schedule is still whole, no longer
redundant) and its runs are still judged; only when no region sends it as
deployed is it drifted as in one region, its runs not judged. A region whose
Scheduler cannot be listed (a region outage) is left out of the listing, so an
outage of one region is never read as drift; if none can be listed, the audit
says so as it does for one region.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runledger.audit.scheduler_state import Lister, LiveJob, drift
from runledger.exceptions import SchedulerUnreadable
from runledger.schedules import JobSchedule


class RegionListing(dict[str, LiveJob]):
    """The live jobs of several regions: as a mapping, the first listed region's.

    `by_region` holds each listed region's jobs, in the stack's region order;
    `unread` why each other region could not be listed.
    """

    def __init__(
        self, by_region: Mapping[str, Mapping[str, LiveJob]], unread: Mapping[str, str]
    ) -> None:
        super().__init__(next(iter(by_region.values())))
        self.by_region = dict(by_region)
        self.unread = dict(unread)


def regional_lister(listers: Mapping[str, Lister]) -> Lister:
    """One lister over every region's Scheduler (`listers` in the stack's region order)."""

    def listing(since: datetime) -> RegionListing:
        by_region: dict[str, Mapping[str, LiveJob]] = {}
        unread: dict[str, str] = {}
        for region, lister in listers.items():
            try:
                by_region[region] = lister(since)
            except SchedulerUnreadable as exc:  # SchedulerAbsent (a local run) goes up
                unread[region] = str(exc)
        if not by_region:
            raise SchedulerUnreadable("; ".join(f"{r}: {why}" for r, why in unread.items()))
        return RegionListing(by_region, unread)

    return listing


@dataclass(frozen=True)
class RegionDrift:
    """A job some region's Scheduler does not send as deployed.

    `judged`: another region still sends it as deployed, so its runs are judged.
    """

    reason: str
    judged: bool


def by_region(
    schedules: Sequence[JobSchedule], live: Mapping[str, LiveJob] | None
) -> tuple[Mapping[str, LiveJob] | None, dict[str, RegionDrift]]:
    """Each job's live state from a region that sends it as deployed, and its regions' drift.

    A listing of one region (not a `RegionListing`) is returned as it is, with no drift.
    """
    if not isinstance(live, RegionListing) or len(live.by_region) < 2:
        return live, {}
    chosen: dict[str, LiveJob] = {}
    drifts: dict[str, RegionDrift] = {}
    for schedule in schedules:
        reasons = {region: drift(schedule, jobs) for region, jobs in live.by_region.items()}
        whole = [region for region, reason in reasons.items() if not reason]
        off = {region: reason for region, reason in reasons.items() if reason}
        if whole:
            chosen[schedule.id] = live.by_region[whole[0]][schedule.id]
        if not off:
            continue
        said = "; ".join(f"in {region}: {reason}" for region, reason in off.items())
        if whole:
            said += (
                f" ({', '.join(whole)} still sends its runs: the schedule is whole, "
                "but no longer redundant)"
            )
        drifts[schedule.id] = RegionDrift(said, judged=bool(whole))
    return chosen, drifts


def schedule_lister(
    factory: Callable[[str, str, Mapping[str, str]], Lister],
    project: str,
    regions: Sequence[str],
    env: Mapping[str, str],
) -> Lister:
    """The lister of the schedule's live jobs: its one region's, or every region's."""
    if len(regions) == 1:
        return factory(project, regions[0], env)
    return regional_lister({region: factory(project, region, env) for region in regions})


def region_states(
    schedule: JobSchedule, live: Mapping[str, LiveJob]
) -> dict[str, dict[str, Any]] | None:
    """Each region's live state of one job, for `ops describe`; None for one region."""
    if not isinstance(live, RegionListing) or len(live.by_region) + len(live.unread) < 2:
        return None
    states: dict[str, dict[str, Any]] = {}
    for region, jobs in live.by_region.items():
        state = jobs.get(schedule.id)
        detail = (
            "not in Cloud Scheduler" if state is None else ("paused" if state.paused else "enabled")
        )
        states[region] = {"read": True, "detail": detail, "drift": drift(schedule, jobs) or None}
    for region, why in live.unread.items():
        states[region] = {"read": False, "detail": f"could not be read: {why}", "drift": None}
    return states
