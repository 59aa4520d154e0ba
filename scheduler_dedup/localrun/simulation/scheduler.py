"""Cloud Scheduler as documented, on the fake clock (platform-facts.md, "Cloud Scheduler").

Per job: it fires at each time of its live schedule in its time zone (daylight
saving as `audit.expected.schedule_instants` resolves it) unless the job is
paused; it "will never allow two simultaneously outstanding executions", so a
time that comes while an attempt is still outstanding is not sent; an attempt
that has not answered within the attempt deadline counts as failed while its
request works on; a failed attempt is retried per its RetryConfig with
exponential backoff (`facts.RetryPolicy.backoff_s`) "retry_count times, or until
the next scheduled execution time, whichever comes first"; a 2xx answer may be
lost on its way back (a failed attempt, retried), and a delivery may arrive twice.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from runledger.audit.pause_log import UPDATE_CALL, StateChange
from runledger.facts import RetryPolicy
from scheduler_dedup.localrun.simulation import instants
from scheduler_dedup.localrun.simulation.clock import Loop

# Sends one delivery (job, stamped time or None, forced) and calls back with its status.
Send = Callable[[str, datetime | None, bool, Callable[[int], None]], None]


@dataclass
class LiveJob:
    """What Cloud Scheduler holds for one job: its live schedule and state."""

    id: str
    schedule: str
    time_zone: str
    deadline: timedelta
    retry: RetryPolicy
    paused: bool = False
    # Every PauseJob/ResumeJob/UpdateJob call, oldest first: what its Admin Activity log shows.
    changes: list[StateChange] = field(default_factory=list)
    outstanding: bool = False
    fired: list[datetime] = field(default_factory=list)
    # The times the live schedule fires at (first instants), and which edit planned them.
    plan: list[datetime] = field(default_factory=list)
    generation: int = 0


class CloudScheduler:
    """Fires every live job on the loop and sends its attempts through `send`."""

    def __init__(
        self, loop: Loop, rng: random.Random, send: Send, lost: float, duplicate: float
    ) -> None:
        self._loop = loop
        self._rng = rng
        self._send = send
        self._lost = lost
        self._duplicate = duplicate
        self.jobs: dict[str, LiveJob] = {}
        self.unsent: list[tuple[str, datetime]] = []  # times not sent: an attempt was outstanding

    def add(self, job: LiveJob, start: datetime, end: datetime) -> None:
        """Fire `job` at its live schedule's times in (start, end]; a schedule edit re-plans."""
        self.jobs[job.id] = job
        self._plan(job, start, end)

    def _plan(self, job: LiveJob, start: datetime, end: datetime) -> None:
        job.generation += 1
        # A wall time the clocks repeat is sent once, stamped with its first instant.
        listed = instants.listed(job.schedule, job.time_zone, start, end)
        job.plan = [instants[0] for instants in listed if instants[0] > start]
        for index, at in enumerate(job.plan):
            self._loop.at(at, lambda i=index, g=job.generation: self._fire(job, i, g))

    def edit(self, job_id: str, schedule: str, end: datetime) -> None:
        """An UpdateJob of the live schedule (the console's, a deploy's): later times
        follow the new one, and the call goes to the job's log."""
        job = self.jobs[job_id]
        job.schedule = schedule
        job.changes.append(StateChange(self._loop.now, False, UPDATE_CALL))
        self._plan(job, self._loop.now, end)

    def remove(self, job_id: str) -> None:
        """DeleteJob: none of its later times is sent."""
        self.jobs.pop(job_id).generation += 1

    def set_paused(self, job_id: str, paused: bool, at: datetime) -> None:
        """PauseJob or ResumeJob, if the state changes: each call goes to the job's log."""
        job = self.jobs[job_id]
        if job.paused != paused:
            job.paused = paused
            job.changes.append(StateChange(at, paused))

    def _fire(self, job: LiveJob, index: int, generation: int) -> None:
        if job.generation != generation or job.paused:
            return
        at = job.plan[index]
        if job.outstanding:
            self.unsent.append((job.id, at))
            return
        job.fired.append(at)
        job.outstanding = True
        self._attempt(job, at, 0, self._next_fire(job, at))

    def _next_fire(self, job: LiveJob, at: datetime) -> datetime:
        index = bisect.bisect_right(job.plan, at)
        return job.plan[index] if index < len(job.plan) else at + timedelta(days=1)

    def _attempt(self, job: LiveJob, at: datetime, index: int, following: datetime) -> None:
        answered = {"done": False}

        def settle(status: int | None) -> None:
            if answered["done"]:
                return
            answered["done"] = True
            ok = status is not None and 200 <= status < 300 and self._rng.random() >= self._lost
            if ok:
                job.outstanding = False
                return
            if index < job.retry.retry_count:
                retry_at = self._loop.now + timedelta(seconds=job.retry.backoff_s(index))
                if retry_at < following:
                    self._loop.at(retry_at, lambda: self._attempt(job, at, index + 1, following))
                    return
            job.outstanding = False

        self._send(job.id, at, False, settle)
        self._loop.after(job.deadline, lambda: settle(None))
        if self._rng.random() < self._duplicate:
            delay = timedelta(seconds=self._rng.uniform(0, 5))
            self._loop.after(delay, lambda: self._send(job.id, at, False, lambda status: None))

    def force(self, job_id: str, stamped: bool) -> None:
        """`gcloud scheduler jobs run`: the next scheduled time, or no ScheduleTime at all."""
        job = self.jobs[job_id]
        at = self._next_fire(job, self._loop.now) if stamped else None
        self._send(job.id, at, True, lambda status: None)
