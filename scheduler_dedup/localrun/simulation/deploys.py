"""A deploy while runs are in flight: the `deploy_in_flight` class.

The class gives the stack a job of its own, `deployed`, whose life is the stack's:
it is there from the start or not, and one to three deploys create it, edit its
schedule, delete it (and may create it again with the schedule it had), or change
only the handler's settings. A deploy goes as `pulumi up` goes: the function's new
revision, built by `App.from_env` from the program's new environment (the job in
DEDUP_SCHEDULES and its body in the jobs module, or neither; another heartbeat or a
longer retention the program accepts), rolls out first. For a while both revisions
take new requests (Cloud Run splits them), requests in flight finishing where they
started; then the new one takes them all, and only then does Scheduler's job change
(the job depends on the function): created, its schedule updated, or deleted. So a
revision that lacks the job answers its deliveries 404, and an audit of the revision
that has it sees it drift until Scheduler follows. Now and then a deploy's program
sets another contract version than the handler speaks (a mispinned deploy): the new
revision refuses to start (`config.check_contract`), Cloud Run keeps the old one
serving, the deploy fails and Scheduler stays as it was.

The oracle expects the job's times only while Scheduler has it, by the schedule it
had then (`DeployHistory`, `expected`): a time before the job exists or after it is
gone is never due, and neither a run of it nor a finding naming it may happen
(`check`). The times a deleted job's Scheduler still sends once the stack has left it
(from the deploy's start to the deletion) need no fate, but never run twice.

Every draw comes from generators of the class's own, so every other class's world
stays as it is without it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runledger.audit.pause_log import StateChange
from runledger.config import CONTRACT_ENV
from runledger.exceptions import ConfigError
from runledger.facts import CONTRACT_VERSION, RetryPolicy
from runledger.ledger.epochs import AuditEpoch
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.watermarks import shard_key
from scheduler_dedup.localrun.simulation.instants import listed
from scheduler_dedup.localrun.simulation.scheduler import LiveJob
from scheduler_dedup.localrun.simulation.violation import Violation

if TYPE_CHECKING:
    from runledger.service.app import App, Response
    from scheduler_dedup.localrun.simulation.checker import Expected
    from scheduler_dedup.localrun.simulation.scenario import Scenario, SimJob
    from scheduler_dedup.localrun.simulation.world import World

DEPLOYED = "deployed"
SCHEDULES = ("*/2 * * * *", "*/4 * * * *", "1-59/3 * * * *")
# The share of seeds (with the class on) whose stack has the job and deploys it.
SHARE = 0.75
# How long both revisions take new requests; the new one's share of them meanwhile.
SPLITS_S = (0, 20, 90, 240)
SHARES = (0.1, 0.5, 0.9)
# Settings a new revision may carry: a heartbeat at or above the floor, a longer retention.
HEARTBEATS_S = (48, 60, 90)
LONGER_RETENTION = (timedelta(0), timedelta(hours=1))
# The share of deploys whose program sets the previous contract version.
OTHER_CONTRACT = 0.15


@dataclass(frozen=True)
class Deploy:
    at: datetime  # `pulumi up` starts: the new revision rolls out
    schedule: str | None  # the stack's `deployed` job after it (None: not in the stack)
    split: timedelta  # both revisions take new requests this long
    share: float  # the new revision's share of them meanwhile
    heartbeat: timedelta
    retention: timedelta  # added to the seed's
    contract: int  # the DEDUP_CONTRACT_VERSION the deploy's program sets


@dataclass(frozen=True)
class Plan:
    job: SimJob  # the class's job (its schedule: the first the stack gives it)
    initial: str | None  # its schedule at the start (None: not in the stack yet)
    deploys: tuple[Deploy, ...]


def draw(seed: int, start: datetime, end: datetime, job: SimJob) -> Plan | None:
    """The seed's deploys of `job` (its retry and deadline already drawn), or None."""
    draws = random.Random(f"{seed}-deploy")
    if draws.random() >= SHARE:
        return None
    initial = draws.choice(SCHEDULES) if draws.random() < 0.5 else None
    span = int((end - start).total_seconds()) - 25 * 60
    moments = sorted(
        start + timedelta(seconds=15 * 60 + draws.randint(0, span))
        for _ in range(draws.randint(1, 3))
    )
    current, first, deploys = initial, initial, []
    ready = start  # the stack's lock: a `pulumi up` starts once the one before it ended
    for at in moments:
        at = max(at, ready)
        if current is None:
            after: str | None = draws.choice(SCHEDULES if first is None else (first, *SCHEDULES))
        else:
            after = draws.choice((None, current, *(s for s in SCHEDULES if s != current)))
        contract = CONTRACT_VERSION - 1 if draws.random() < OTHER_CONTRACT else CONTRACT_VERSION
        deploys.append(
            Deploy(
                at.replace(microsecond=500_000),
                after,
                timedelta(seconds=draws.choice(SPLITS_S)),
                draws.choice(SHARES),
                timedelta(seconds=draws.choice(HEARTBEATS_S)),
                draws.choice(LONGER_RETENTION),
                contract,
            )
        )
        # Its rollout, then Scheduler's change, then the next may begin (seed 46: a
        # deploy's Scheduler change landing after the next deploy's was no `pulumi up`).
        ready = deploys[-1].at + deploys[-1].split + timedelta(minutes=1)
        if contract == CONTRACT_VERSION:
            current = after
            first = first or after
    # Every seed's first deploy of an absent job creates it: its first schedule is known.
    schedule = initial or next(d.schedule for d in deploys if d.schedule)
    return Plan(replace(job, schedule=schedule), initial, tuple(deploys))


def retry(seed: int) -> tuple[timedelta, RetryPolicy]:
    """The job's attempt deadline and retry config, from the class's own generator."""
    draws = random.Random(f"{seed}-deploy-job")
    deadline = timedelta(seconds=draws.choice((30, 60)))
    return deadline, RetryPolicy(retry_count=draws.randint(0, 2), min_backoff_s=10)


def start(scenario: Scenario, history: Any, until: datetime) -> list[SimJob]:
    """The class's job as the stack has it at the start (none: not yet); the history
    learns the job's zone, and `until` when the world stops at the latest."""
    plan = scenario.deploys
    if plan is None:
        return []
    history.deploys.zone, history.deploys.until = plan.job.time_zone, until
    return [] if plan.initial is None else [replace(plan.job, schedule=plan.initial)]


def schedule(scenario: Scenario) -> None:
    """Add the job's creation at the start (if the stack has it) and each deploy."""
    plan = scenario.deploys
    if plan is None:
        return
    if plan.initial is not None:
        # Deployed before the window, as the audit is: Scheduler sends its time at the start.
        scenario.actions.append((scenario.start, _existing(plan.initial)))
    for index, deploy in enumerate(plan.deploys):
        scenario.actions.append((deploy.at, _deploy(index, deploy)))
        what = "deletes" if deploy.schedule is None else f"sets {deploy.schedule!r} for"
        scenario.notes.append(
            f"{deploy.at:%H:%M:%S} deploy {what} {DEPLOYED} (split "
            f"{int(deploy.split.total_seconds())} s at {deploy.share:g}, heartbeat "
            f"{int(deploy.heartbeat.total_seconds())} s, contract {deploy.contract})"
        )


def _existing(schedule: str) -> Any:
    def act(world: World) -> None:
        _scheduler_change(world, schedule)

    return act


def _deploy(index: int, deploy: Deploy) -> Any:
    def act(world: World) -> None:
        plan = world.scenario.deploys
        assert plan is not None
        before = world.deployed, world.settings
        world.deployed = (
            [] if deploy.schedule is None else [replace(plan.job, schedule=deploy.schedule)]
        )
        world.settings = replace(
            world.scenario.settings,
            heartbeat=deploy.heartbeat,
            retention=world.scenario.settings.retention + deploy.retention,
        )
        contract = {CONTRACT_ENV: str(deploy.contract)}
        try:
            new = {
                r: world._deploy(r, {**world.env(r), **contract}) for r in world.scenario.regions
            }
        except ConfigError as exc:
            world.deployed, world.settings = before
            world.history.event(
                world.loop.now,
                f"deploy {index + 1}: the new revision refuses to start ({exc}); the old one "
                "serves on, the deploy fails, Scheduler is left as it was",
            )
            return
        split = random.Random(f"{world.scenario.seed}-deploy-split-{index}")
        world.apps = {
            region: Rollout(world.apps[region], app, deploy.share, split)
            for region, app in new.items()
        }
        world.history.event(world.loop.now, f"deploy {index + 1}: the new revision rolls out")
        world.loop.after(deploy.split, lambda: _rolled_out(world, index, deploy, new))

    return act


def _rolled_out(world: World, index: int, deploy: Deploy, new: Mapping[str, App]) -> None:
    """The new revision takes every new request; then Scheduler's job follows the stack."""
    for region, app in new.items():
        current = world.apps[region]
        if isinstance(current, Rollout) and current.new is app:  # no later deploy replaced it
            world.apps[region] = app
    world.history.event(world.loop.now, f"deploy {index + 1}: the new revision takes it all")
    _scheduler_change(world, deploy.schedule)


def _scheduler_change(world: World, schedule: str | None) -> None:
    """CreateJob, UpdateJob or DeleteJob for the class's job, as the stack now has it."""
    plan = world.scenario.deploys
    assert plan is not None
    live = world.scheduler.jobs.get(DEPLOYED)
    now = world.loop.now
    if now == world.scenario.start:
        now -= timedelta(seconds=1)
    judged: tuple[datetime | None, frozenset[datetime]] = (None, frozenset())
    if live is not None:  # what the audit's watermark has judged of the job's live schedule
        key = shard_key(world.scenario.project, world.scenario.region, DEPLOYED)
        shard = world.inner.get_shards([key]).get(key)
        mark = None if shard is None else shard.marks.get(DEPLOYED)
        if mark is not None and mark.schedule == live.schedule:
            held = frozenset(a for run in mark.open if run.finding is None for a in run.instants)
            judged = (mark.judged_to, held)
    calls = world.history.deploys.calls
    if schedule is None and live is not None:
        world.scheduler.remove(DEPLOYED)
        calls[:] = [*live.changes, StateChange(now, True, "DeleteJob")]
    elif schedule is not None and live is None:
        job = plan.job
        created = LiveJob(DEPLOYED, schedule, job.time_zone, job.deadline, job.retry)
        created.changes = [*calls, StateChange(now, False, "CreateJob")]  # its log goes on
        world.scheduler.add(created, now, world.settle_cap)
    elif schedule is not None and live is not None and live.schedule != schedule:
        world.scheduler.edit(DEPLOYED, schedule, world.settle_cap)
    else:
        return
    world.history.deploys.changes.append((now, schedule))
    world.history.deploys.judged.append(judged)
    text = "deleted" if schedule is None else f"scheduled {schedule!r}"
    world.history.event(now, f"{DEPLOYED} {text} in Cloud Scheduler (the stack's)")


class Rollout:
    """Two revisions of one function taking new requests at once: `share` go to the new."""

    def __init__(self, old: Any, new: App, share: float, rng: random.Random) -> None:
        self.old = old
        self.new = new
        self._share = share
        self._rng = rng

    def handle(self, method: str, headers: Any, body: bytes) -> Response:
        app = self.new if self._rng.random() < self._share else self.old
        return app.handle(method, headers, body)


@dataclass
class DeployHistory:
    """What Scheduler had of the class's job: its schedule from each moment (None: gone);
    what the audit's watermark had judged of it at each change (`judged_to`, and the
    times it still held open unjudged, under a live lease); each epoch an audit
    recorded for it (when, for which schedule, from when)."""

    changes: list[tuple[datetime, str | None]] = field(default_factory=list)
    judged: list[tuple[datetime | None, frozenset[datetime]]] = field(default_factory=list)
    epochs: list[tuple[datetime, str, datetime]] = field(default_factory=list)
    # The job's Admin Activity log while Scheduler has no job to hold it (deleted).
    calls: list[StateChange] = field(default_factory=list)
    zone: str = "UTC"
    until: datetime | None = None

    def unjudged(
        self, instants: tuple[datetime, ...], begin: datetime, end: datetime, schedule: str
    ) -> bool:
        """Whether the audit leaves the time `at` of the segment (begin, end] unjudged, as
        docs/audit.md ("The epoch") says it does: before the epoch the first audit after
        the change records, or not yet judged when the job's schedule changed or it was
        deleted (its watermark starts over, or the job is gone from DEDUP_SCHEDULES)."""
        # A wall time a clock change repeats is one run, before the epoch by its first
        # instant, behind the watermark by its last (`audit.walk`).
        at, last = instants[0], instants[-1]
        epoch = next((since for w, s, since in self.epochs if w >= begin and s == schedule), None)
        if epoch is None or at <= epoch + MAX_CLOCK_SKEW:
            return True
        index = next((i for i, (when, _) in enumerate(self.changes) if when == end), None)
        if index is None:
            return False  # the segment is open to the world's end
        judged_to, held = self.judged[index]
        return judged_to is None or last > judged_to or at in held

    def segments(self, until: datetime) -> list[tuple[datetime, datetime, str]]:
        """(from, to, schedule): Scheduler sent the job's times in (from, to] by schedule."""
        ends = [at for at, _ in self.changes[1:]] + [until][: len(self.changes)]
        return [
            (at, end, schedule)
            for (at, schedule), end in zip(self.changes, ends, strict=True)
            if schedule is not None
        ]


def retired(history: DeployHistory, expected: Sequence[Expected]) -> set[tuple[str, datetime]]:
    """The class's job's times of a schedule Scheduler had until a change: no audit judges
    them after it, so a release of one then is answered by no finding (`ops_release`)."""
    ends = [when for when, _ in history.changes[1:]]
    return {
        (time.job, at)
        for time in expected
        if time.job == DEPLOYED and any(time.instants[-1] <= end for end in ends)
        for at in time.instants
    }


def expected(
    scenario: Scenario, history: DeployHistory, project: str, region: str
) -> list[Expected]:
    """The class's job's times in the window, by the schedule Scheduler had at each."""
    from scheduler_dedup.localrun.simulation.checker import expected_times

    plan = scenario.deploys
    if plan is None:
        return []
    times = []
    for begin, end, schedule in history.segments(scenario.end):
        # The job there from the start was created a second before it: Scheduler sends
        # its time at the start, which no audit judges (before its first epoch), and an
        # `ops release` of it is answered by no finding (seed 589).
        first, last = begin, min(end, scenario.end)
        if first >= last:
            continue
        for time in expected_times(
            [(DEPLOYED, schedule, plan.job.time_zone)], first, last, project, region
        ):
            unjudged = history.unjudged(time.instants, begin, end, schedule)
            times.append(replace(time, optional=unjudged))
    return times


class EpochsSeen:
    """The store, telling the history each epoch an audit writes for the class's job."""

    def __init__(self, inner: Any, history: DeployHistory, now: Callable[[], datetime]) -> None:
        self._inner = inner
        self._history = history
        self._now = now

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _seen(self, epoch: AuditEpoch) -> None:
        if epoch.job == DEPLOYED:
            self._history.epochs.append((self._now(), epoch.schedule, epoch.since))

    def create_epoch(self, key: str, epoch: AuditEpoch) -> Any:
        version = self._inner.create_epoch(key, epoch)
        self._seen(epoch)
        return version

    def replace_epoch(self, key: str, epoch: AuditEpoch, version: Any) -> Any:
        version = self._inner.replace_epoch(key, epoch, version)
        self._seen(epoch)
        return version


def check(
    history: DeployHistory,
    executions: Mapping[str, Sequence[Any]],
    findings: Sequence[tuple[datetime, str, datetime | None, str, Any]],
) -> list[Violation]:
    """A time of the class's job that Scheduler never had (before the job existed, after
    it was gone, or of a schedule it did not have then) is never run, never reported."""
    if history.until is None:
        return []
    sent = {
        instant
        for begin, end, schedule in history.segments(history.until)
        for instants in listed(schedule, history.zone, begin, end)
        if instants[0] > begin
        for instant in instants
    }
    found = []
    for runs in executions.values():
        for run in runs:
            if run.job == DEPLOYED and not run.manual and run.schedule_time not in sent:
                found.append(
                    Violation(
                        DEPLOYED,
                        run.schedule_time,
                        "unscheduled time run",
                        f"attempt {run.attempt_id} ({run.trigger}) started at "
                        f"{run.start:%H:%M:%S}, a time its job's Scheduler never had",
                    )
                )
    # A finding not caught up (the job's is on) says its time's state is unknown (its
    # pause log unread): the audit's doubt, told as such, not a claim the time was due.
    for at, job, when, outcome, catch_up in findings:
        if job == DEPLOYED and when is not None and when not in sent and catch_up is not None:
            found.append(
                Violation(
                    DEPLOYED,
                    when,
                    "unscheduled time reported",
                    f"{outcome} at {at:%H:%M:%S}, a time its job's Scheduler never had",
                )
            )
    return found
