"""A seed's history as a person reads it: the world, then each violating time's story."""

from __future__ import annotations

from datetime import datetime
from typing import IO

from scheduler_dedup.localrun.simulation.run import SeedResult


def print_trace(result: SeedResult, out: IO[str], limit: int = 5) -> None:
    """The scenario's stack and actions, then up to `limit` violating times, event by event."""
    scenario = result.scenario
    print(
        f"seed {scenario.seed}: {scenario.start:%Y-%m-%d %H:%M}Z to {scenario.end:%H:%M}Z, "
        f"settled at {scenario.settle:%H:%M}Z; fault classes on: "
        f"{', '.join(sorted(scenario.features)) or 'none'}",
        file=out,
    )
    for job in scenario.jobs:
        print(
            f"  job {job.id}: {job.schedule!r} {job.time_zone}, overlap {job.overlap}, "
            f"catch-up {job.catch_up}, deadline {int(job.deadline.total_seconds())} s, "
            f"retries {job.retry.retry_count}"
            + (
                f", window {_bound(job.start_at)} .. {_bound(job.end_at)}"
                if job.start_at or job.end_at
                else ""
            ),
            file=out,
        )
    print(
        f"  store faults: rate {scenario.fault_rate}, drawn {result.faults}; outages "
        + ", ".join(f"{a:%H:%M:%S}-{b:%H:%M:%S}" for a, b in scenario.outages),
        file=out,
    )
    seconds = scenario.operator_skew.total_seconds()
    print(
        f"  operator's laptop clock off by {seconds:+.1f} s; instances' by up to "
        f"±{scenario.skew.total_seconds():g} s",
        file=out,
    )
    if scenario.api_fault_rate or scenario.api_versions != ("v1",):
        print(
            f"  Scheduler and log reads: versions {', '.join(scenario.api_versions)}, fault rate "
            f"{scenario.api_fault_rate}, drawn {result.api_faults}; log lags up to "
            f"{max(scenario.log_lags_s)} s",
            file=out,
        )
    if scenario.staged:  # `job_work`
        staged = ", ".join(f"{job} {count}" for job, count in sorted(scenario.staged.items()))
        print(f"  staged bodies (stages): {staged}", file=out)
    if scenario.request_timeout is not None:  # `request_timeout`
        timeout = scenario.request_timeout
        print(
            f"  request timeout {int(timeout.after.total_seconds())} s, then "
            f"{timeout.throttle:g}x slower",
            file=out,
        )
    if len(scenario.regions) > 1:  # `region_outage`
        outages = ", ".join(
            f"{o.region} {o.kind} {o.start:%H:%M:%S}-{o.end:%H:%M:%S}"
            for o in scenario.region_outages
        )
        print(f"  regions {', '.join(scenario.regions)}; out: {outages}", file=out)
    for note in scenario.notes:
        print(f"  operator {note}", file=out)
    for when, text in result.history.events:
        print(f"  {when:%H:%M:%S.%f} {text}", file=out)
    shown = 0
    for violation in result.violations:
        print(f"\nVIOLATION {violation.line()}", file=out)
        if violation.schedule_time is None or shown >= limit:
            continue
        shown += 1
        story = result.history.timeline.get((violation.job, violation.schedule_time), [])
        for when, text in story:
            print(f"  {when:%H:%M:%S.%f} {text}", file=out)


def _bound(at: datetime | None) -> str:
    return "open" if at is None else f"{at:%H:%M:%S}"
