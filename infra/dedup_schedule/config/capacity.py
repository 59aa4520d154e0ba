"""Whether the handler's instances can serve every request the stack's jobs can have open.

A delivery that meets a run held by a live attempt waits for that attempt's outcome
(`runledger.delivery.duplicate_wait`), and holds one of an instance's concurrent requests meanwhile.
Cloud Run answers a request that finds every instance at `maxInstances` busy with
its `concurrency` requests with 429 once it has waited in the pending queue ("About
instance autoscaling": requests are queued up to a limit, then failed with 429), so
waiters must never use up the capacity another job's delivery needs.

The bound, per job: a run has requests open from its first attempt until its
holder's request ends, at most its retry window plus what a holder's request may
outlast its attempt deadline by (request timeout minus deadline). Runs of the job
whose spans overlap are counted by scanning its schedule. Each open run has at most
two requests in flight: the holder's, and one Scheduler attempt waiting, because
Scheduler sends a run's next attempt only after the previous one ended, and a
waiting attempt answers inside its attempt deadline. The audit's own job adds one
request (its catch-ups run inside it). Copies of a request that at-least-once
delivery adds are rare and short; `HEADROOM` leaves room for as many again.

In a stack of several regions every region's Scheduler sends every run to its own
region's handler, so each region's handler sees the bound above: its own region's
attempt waiting and a holder (its own, or the other region's delivery of the same
run waiting on one held elsewhere), and alone all of it while the other region is
down. The verdict is therefore per region's handler, and the summary counts every
region's deliveries.

The bound is a worst case (every run retried to its last attempt while its
holder's request lasts the whole request timeout), so a stack short of it is
warned about at plan time (`pulumi up` and `make plan` show the numbers as the
`handlerCapacity` output), not refused.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from croniter import croniter

from dedup_schedule.config.model import JobConfig, ScheduleConfig

# Requests in flight per open run: the holder and one waiting Scheduler attempt.
REQUESTS_PER_RUN = 2
# Capacity asked for per request the jobs can have open: as many again for copies.
HEADROOM = 2
# How far each schedule is scanned for overlapping runs: patterns repeat within a week.
_SCAN_DAYS = 8
_SCAN_TIMES = 20_000
_SCAN_START = datetime(2025, 1, 6, tzinfo=UTC)


def run_span_s(job: JobConfig, request_timeout_s: int) -> float:
    """How long after its first attempt one run of `job` may still have a request open."""
    return job.retry_window_s + max(0, request_timeout_s - job.attempt_deadline_s)


def overlapping_runs(schedule: str, span_s: float) -> int:
    """The most schedule times of `schedule` that fall within any `span_s` window."""
    times = croniter(schedule, _SCAN_START - timedelta(seconds=1))
    window: deque[datetime] = deque()
    most = 1
    end = _SCAN_START + timedelta(days=_SCAN_DAYS)
    span = timedelta(seconds=span_s)
    for _ in range(_SCAN_TIMES):
        current = times.get_next(datetime)
        if current > end:
            break
        window.append(current)
        while window[0] <= current - span:
            window.popleft()
        most = max(most, len(window))
    return most


@dataclass(frozen=True)
class Capacity:
    """Requests the stack's jobs can have in flight at once, against what the handler serves."""

    per_job: dict[str, int]
    audit: int
    serves: int
    # How many regions' Schedulers send every run, each to its own handler.
    regions: int = 1

    @property
    def in_flight(self) -> int:
        return sum(self.per_job.values()) + self.audit

    @property
    def needed(self) -> int:
        return self.in_flight * HEADROOM

    @property
    def holds(self) -> bool:
        return self.serves >= self.needed

    def summary(self) -> str:
        """The numbers, and whether they hold, as the plan and `pulumi up` show them."""
        jobs = ", ".join(f"{job} {count}" for job, count in self.per_job.items())
        audit = f" + audit {self.audit}" if self.audit else ""
        verdict = (
            "holds"
            if self.holds
            else "SHORT: raise concurrency (the handler is I/O bound) or maxInstances"
        )
        each = (
            f"each of {self.regions} regions' handlers (every region sends every run; "
            f"{self.regions * self.in_flight} in flight over all regions): "
            if self.regions > 1
            else ""
        )
        return (
            f"{each}{self.serves} concurrent requests (maxInstances x concurrency) for at most "
            f"{self.in_flight} in flight ({jobs}{audit}), x{HEADROOM} for copies = "
            f"{self.needed}: {verdict}"
        )


def capacity(config: ScheduleConfig) -> Capacity:
    """The stack's bound on requests in flight, per job, against what its handler serves."""
    per_job = {
        job.id: REQUESTS_PER_RUN
        * overlapping_runs(job.schedule, run_span_s(job, config.request_timeout_s))
        for job in config.jobs
    }
    return Capacity(
        per_job=per_job,
        audit=0 if config.audit_job is None else 1,
        serves=config.max_instances * config.concurrency,
        regions=len(config.regions),
    )
