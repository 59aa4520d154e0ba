"""A Cloud Scheduler that misbehaves like the real one, in compressed time.

Cloud Scheduler delivers at least once: attempts time out while the target
still works, answers get lost, proxies repeat requests, operators force runs.
This module decides all of that from a seeded RNG and injected time, so a
demo run or a test is reproducible and the decisions are testable without
HTTP. Sending is behind the `Transport` protocol (see `scheduler_dedup.localrun.demo_http`).

Time compression: every duration the Scheduler knows (attempt deadline,
backoff, max retry duration) is given here already scaled to demo seconds;
schedule times are the real cron fire times of the last few periods, which
lie in the past of the handler's wall clock, so the handler sees genuine
scheduled runs. A forced run carries the next fire time, in the future, as
the real Scheduler does.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol
from zoneinfo import ZoneInfo

from runledger.audit.expected import schedule_instants
from runledger.delivery.identify import schedule_time_text, scheduler_headers
from runledger.facts import RetryPolicy
from scheduler_dedup.localrun.demo_plan import Step, run_label

USER_AGENT = "Google-Cloud-Scheduler"
# A forced run must carry a time this far ahead of the handler's clock for the
# whole demo, or the handler (10 s tolerance) would take it for the scheduled run.
FORCED_RUN_MIN_LEAD = timedelta(minutes=5)
# The demo's audit looks back to `replayed_since` from the moment the runs were
# planned, so by the time it runs its window starts that much later. Runs the
# audit must find are drawn from those at least this far inside the window:
# far longer than a demo takes to reach its audit.
AUDIT_MARGIN = timedelta(minutes=10)


# --- schedule -------------------------------------------------------------------------------

# Fire times are listed over a window that starts at a day and doubles until it
# holds enough; a unix-cron schedule that fires at all (a 29 February one every
# 4 to 8 years) fires within the longest.
_FIRST_SPAN = timedelta(days=1)
_LONGEST_GAP = timedelta(days=366 * 9)


def _fires(schedule: str, time_zone: str, start: datetime, end: datetime) -> list[datetime]:
    """Scheduler's fire times in (start, end], in UTC, as the audit expects them.

    The audit's own listing (`expected.schedule_instants`): a wall time the
    clocks skip does not fire; one they repeat fires once, at its first instant
    (the audit accepts either).
    """
    return [
        instants[0] for instants in schedule_instants(schedule, ZoneInfo(time_zone), start, end)
    ]


def fire_times(schedule: str, time_zone: str, until: datetime, count: int) -> list[datetime]:
    """The last `count` cron fire times at or before `until`, oldest first, in UTC."""
    span = _FIRST_SPAN
    while True:
        times = [when for when in _fires(schedule, time_zone, until - span, until) if when <= until]
        if len(times) >= count or span > _LONGEST_GAP:
            return times[-count:]
        span *= 2


def replayed_since(jobs: Sequence[SimJob], until: datetime, count: int) -> datetime:
    """The latest fire time that is not replayed: every later one, up to `until`, is.

    Each job replays its last `count` fire times, so a frequent job reaches less
    far back than a daily one. After this instant no job has a fire time the
    simulator does not deliver, which is the window an audit can judge.
    """
    return max(fire_times(j.schedule, j.time_zone, until, count + 1)[0] for j in jobs)


def next_fire_time(schedule: str, time_zone: str, after: datetime) -> datetime:
    """The first cron fire time strictly after `after`, in UTC."""
    span = _FIRST_SPAN
    while True:
        later = [when for when in _fires(schedule, time_zone, after, after + span) if when > after]
        if later:
            return later[0]
        if span > _LONGEST_GAP:
            raise ValueError(f"{schedule!r} does not fire within {_LONGEST_GAP.days} days")
        span *= 2


# --- jobs and their retry policy ------------------------------------------------------------


def retry_delays(retry: RetryPolicy) -> tuple[float, ...]:
    """The wait before each retry the job's `retry_count` allows, in the policy's units."""
    return tuple(retry.backoff_s(i) for i in range(retry.retry_count))


def delay_before_retry(retry: RetryPolicy, retries_done: int, elapsed_s: float) -> float | None:
    """Wait before the next retry, or None when the run's retries are exhausted.

    Retries stop after `retry_count` or once `max_retry_duration` has passed
    since the first attempt, whichever comes first. Cloud Scheduler goes on
    until both limits are reached, so the demo never sends more retries than
    the real one; the ledger's retention is sized for the longer of the two.
    """
    if retries_done >= retry.retry_count:
        return None
    if retry.max_retry_duration_s and elapsed_s >= retry.max_retry_duration_s:
        return None
    return retry.backoff_s(retries_done)


@dataclass(frozen=True)
class SimJob:
    """What the Scheduler knows about one job, durations already in demo seconds."""

    id: str
    schedule: str
    time_zone: str
    attempt_deadline_s: float
    retry: RetryPolicy  # RetryConfig with its durations in demo seconds
    headers: tuple[tuple[str, str], ...]  # HttpTarget.headers (project, region, content type)
    body: bytes


# --- the plan: which run misbehaves how -----------------------------------------------------


class Fault(StrEnum):
    """One way at-least-once delivery shows itself; each run gets at most one."""

    TIMEOUT = "timeout"  # the work outlasts the attempt deadline; retries come while it runs
    FAILURE = "failure"  # the work fails retryably, a retry with backoff succeeds
    EXHAUSTED = "exhausted"  # the work fails on every attempt until the retries run out
    LOST_ACK = "lost_ack"  # the handler finishes, the answer never reaches the Scheduler
    BURST = "burst"  # a proxy repeats the first request several times at once
    FORCED = "forced"  # an operator forces a run between two scheduled runs
    DROPPED = "dropped"  # never delivered at all (the job was paused, Scheduler failed)


# Faults that only show with retries configured on the job.
_NEEDS_RETRIES = frozenset({Fault.TIMEOUT, Fault.FAILURE, Fault.EXHAUSTED, Fault.LOST_ACK})
# Faults that leave a run without a success for the audit to find: one run each,
# inside the audit's window.
AUDITED_FAULTS = frozenset({Fault.EXHAUSTED, Fault.DROPPED})
# Faults a scheduled run may get, in the order coverage assigns them.
SCHEDULED_FAULTS = (
    Fault.TIMEOUT,
    Fault.FAILURE,
    Fault.LOST_ACK,
    Fault.BURST,
    Fault.EXHAUSTED,
    Fault.DROPPED,
)


@dataclass(frozen=True)
class RunPlan:
    """One run the simulator will deliver and what will go wrong with it."""

    job: str
    schedule_time: datetime  # UTC
    manual: bool
    fault: Fault | None
    script: tuple[Step, ...]  # what executions 1, 2, ... of the work do
    burst_size: int = 1

    @property
    def label(self) -> str:
        return run_label(self.job, self.schedule_time, self.manual)


@dataclass(frozen=True)
class PlanSettings:
    runs_per_job: int
    fault_rate: float = 0.45  # share of scheduled runs (beyond coverage) that misbehave
    forced_runs: int = 1


def _script(job: SimJob, fault: Fault | None, rng: random.Random) -> tuple[Step, ...]:
    """Work timings for a run, relative to the job's (scaled) attempt deadline."""
    deadline = job.attempt_deadline_s

    def normal() -> float:
        return round(deadline * rng.uniform(0.08, 0.35), 3)

    if fault is Fault.TIMEOUT:
        # Still running when the first retry arrives (so that retry meets the live
        # claim), and normally done before the last retry, so the Scheduler hears of it.
        delays = retry_delays(job.retry)
        first_retry_at = deadline + (delays[0] if delays else 0.0)
        overrun = deadline * rng.uniform(0.3, 0.5)
        if len(delays) > 1:
            overrun = min(overrun, 0.6 * sum(delays[1:]))
        return (Step(round(first_retry_at + max(overrun, 0.5), 3)),)
    if fault is Fault.FAILURE:
        failures = rng.randint(1, min(2, job.retry.retry_count))
        return (*[Step(normal(), fails=True)] * failures, Step(normal()))
    if fault is Fault.EXHAUSTED:
        # Fails until the outage is over (see `Step.fails`): every Scheduler attempt fails,
        # a catch-up by the audit afterwards succeeds.
        return (Step(normal(), fails=True),)
    return (Step(normal()),)


def plan_runs(
    jobs: Sequence[SimJob], now: datetime, settings: PlanSettings, rng: random.Random
) -> list[RunPlan]:
    """The window of scheduled runs ending at `now`, plus forced runs, each with its fault.

    Every scheduled fault is given to at least one run (if any job can show it)
    before the rest are drawn at random, so even a short run exercises every path.
    A dropped run and a run with its retries exhausted lie inside the audit's
    window (`replayed_since` + AUDIT_MARGIN), so the demo's audit can find them.
    """
    slots = [
        (job, when)
        for job in jobs
        for when in fire_times(job.schedule, job.time_zone, now, settings.runs_per_job)
    ]
    audited_from = replayed_since(jobs, now, settings.runs_per_job) + AUDIT_MARGIN

    def fits(fault: Fault, index: int) -> bool:
        job, when = slots[index]
        if fault in _NEEDS_RETRIES and not job.retry.retry_count:
            return False
        return fault not in AUDITED_FAULTS or when > audited_from

    order = list(range(len(slots)))
    rng.shuffle(order)
    faults: dict[int, Fault | None] = {}
    # Most constrained first, so a burst never takes the last slot a retry fault needs.
    for fault in sorted(SCHEDULED_FAULTS, key=lambda f: sum(fits(f, i) for i in order)):
        for index in order:
            if index not in faults and fits(fault, index):
                faults[index] = fault
                break
    for index in order:
        if index in faults:
            continue
        # Exhausted and dropped runs stay rare: one each shows that path in the report.
        choices = [f for f in SCHEDULED_FAULTS if f not in AUDITED_FAULTS and fits(f, index)]
        faults[index] = rng.choice(choices) if rng.random() < settings.fault_rate else None

    plans = []
    for index, (job, when) in enumerate(slots):
        fault = faults[index]
        burst = rng.randint(3, 6) if fault is Fault.BURST else 1
        plans.append(RunPlan(job.id, when, False, fault, _script(job, fault, rng), burst))

    lead = now + FORCED_RUN_MIN_LEAD
    forceable = [job for job in jobs if next_fire_time(job.schedule, job.time_zone, now) >= lead]
    for job in rng.sample(forceable, min(settings.forced_runs, len(forceable))):
        upcoming = next_fire_time(job.schedule, job.time_zone, now)
        plans.append(RunPlan(job.id, upcoming, True, Fault.FORCED, _script(job, None, rng)))
    plans.sort(key=lambda plan: (plan.manual, plan.schedule_time, plan.job))
    return plans


# --- what goes on the wire ------------------------------------------------------------------


def _header_case(name: str, style: int) -> str:
    if style == 1:  # HTTP/1.1 proxies often normalise to Title-Case per dash
        return "-".join(part.capitalize() for part in name.split("-"))
    if style == 2:  # HTTP/2 lower-cases every header
        return name.lower()
    return name


def render_schedule_time(when: datetime, time_zone: str, style: int) -> str:
    """RFC 3339 as Cloud Scheduler sends it: `Z`, the job's local offset, or `+00:00`."""
    if style == 0:
        return schedule_time_text(when, timespec="seconds")
    return schedule_time_text(when, ZoneInfo(time_zone) if style == 1 else UTC, "seconds")


@dataclass(frozen=True)
class Request:
    """One HTTP delivery: headers as sent (names in whatever case) and the body."""

    run: str  # RunPlan.label
    headers: tuple[tuple[str, str], ...]
    body: bytes


def build_request(job: SimJob, plan: RunPlan, rng: random.Random) -> Request:
    case = rng.randrange(3)
    stamp = render_schedule_time(plan.schedule_time, job.time_zone, rng.randrange(3))
    headers = [*scheduler_headers(job.id, stamp), ("User-Agent", USER_AGENT), *job.headers]
    return Request(
        plan.label, tuple((_header_case(name, case), value) for name, value in headers), job.body
    )


# --- driving one run ------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """What came back for one request: a status and outcome, or a timeout (status None)."""

    status: int | None
    outcome: str | None
    latency_s: float


class Transport(Protocol):
    def send_all(self, requests: Sequence[Request], timeout_s: float) -> list[Answer]:
        """Send the requests concurrently; one Answer each, in order."""
        ...


class Seen(StrEnum):
    """How the Scheduler perceived one delivery."""

    ANSWERED = "answered"
    TIMEOUT = "timeout"  # no answer within the attempt deadline
    LOST_ACK = "lost_ack"  # the handler answered, the answer was dropped
    DUPLICATE = "duplicate"  # an extra copy from a burst; its answer reaches nobody


@dataclass(frozen=True)
class Delivery:
    run: str
    job: str
    attempt: int  # 0 = first attempt, n = n-th retry
    seen: Seen
    status: int | None  # what the handler answered (also for lost acks and burst copies)
    outcome: str | None
    latency_s: float
    after: str | None  # why this attempt was sent: None, "timeout", "lost_ack" or "status 500"


@dataclass
class RunResult:
    plan: RunPlan
    deliveries: list[Delivery] = field(default_factory=list)
    acknowledged: bool = False  # the Scheduler saw a 2xx
    exhausted: bool = False  # the Scheduler gave up after its retries

    @property
    def retries(self) -> int:
        return max((d.attempt for d in self.deliveries), default=0)


def drive_run(
    plan: RunPlan,
    job: SimJob,
    transport: Transport,
    rng: random.Random,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    stop: threading.Event | None = None,
) -> RunResult:
    """Deliver one run the way Cloud Scheduler does, until a 2xx or the retries run out."""
    result = RunResult(plan)
    if plan.fault is Fault.DROPPED:
        return result  # no attempt at all: only an audit can notice
    first_sent = clock()
    attempt = 0
    reason: str | None = None
    while stop is None or not stop.is_set():
        copies = plan.burst_size if attempt == 0 else 1
        requests = [build_request(job, plan, rng) for _ in range(copies)]
        answers = transport.send_all(requests, job.attempt_deadline_s)
        primary = answers[0]
        if primary.status is None:
            seen = Seen.TIMEOUT
        elif plan.fault is Fault.LOST_ACK and attempt == 0:
            seen = Seen.LOST_ACK
        else:
            seen = Seen.ANSWERED
        for copy, answer in enumerate(answers):
            result.deliveries.append(
                Delivery(
                    run=plan.label,
                    job=plan.job,
                    attempt=attempt,
                    seen=seen if copy == 0 else Seen.DUPLICATE,
                    status=answer.status,
                    outcome=answer.outcome,
                    latency_s=answer.latency_s,
                    after=reason,
                )
            )
        if seen is Seen.ANSWERED and primary.status is not None and 200 <= primary.status < 300:
            result.acknowledged = True
            return result
        delay = delay_before_retry(job.retry, attempt, clock() - first_sent)
        if delay is None:
            result.exhausted = True
            return result
        reason = str(seen) if seen is not Seen.ANSWERED else f"status {primary.status}"
        sleep(delay)
        attempt += 1
    return result
