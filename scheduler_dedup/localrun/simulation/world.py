"""One seed's world: the stack, its handler revisions, Cloud Scheduler, the operator, the faults.

The handler is the real `App`, built by `App.from_env` from an environment that
`runledger.config.Settings.to_env` and `runledger.schedules` write, as a deploy
writes it, with only the store, the fake clock (and its monotonic time and sleep),
attempt ids, lease renewals, the backfill documents and the live-state lister
injected. A deploy (the stack pausing or unpausing a job)
builds a new App on the same store; requests in flight finish on the old one
(`deploy_in_flight`: both take new requests for a while, `deploys.Rollout`).
Job bodies report what they do to the history (`oracle.History`), never to
the ledger. The operator's backfill goes the way `python -m runledger.ops
backfill` goes (`backfill.plan.plan`, then `backfill.queue.record_request`), on
the operator's own clock, then forces the audit to run.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from runledger.audit.pauses import job_timeline
from runledger.audit.regions import regional_lister
from runledger.audit.scheduler_state import LiveJob as ListedJob
from runledger.audit.scheduler_state import session_listing
from runledger.backfill import queue
from runledger.backfill.plan import MODE_FAILED, MODE_MISSING, Plan, plan
from runledger.config import DEAD_LETTER_TOPIC_ENV, Settings
from runledger.delivery.identify import generation_key, parse_schedule_time, scheduler_headers
from runledger.exceptions import LeaseLost, TerminalJobError
from runledger.ledger.suspension import (
    Suspension,
    SuspensionRefused,
    change,
    resumed_by,
    suspended_by,
    suspension_key,
)
from runledger.schedules import audit_env, audit_settings, schedule_entry
from runledger.sdk.context import RunContext
from runledger.service.app import App
from scheduler_dedup.localrun.simulation import deploys, regions, timeouts, ttl
from scheduler_dedup.localrun.simulation.clock import Loop, LoopRenewals, Task
from scheduler_dedup.localrun.simulation.oracle import Execution, History
from scheduler_dedup.localrun.simulation.scenario import Scenario, SimJob
from scheduler_dedup.localrun.simulation.scheduler import CloudScheduler, LiveJob
from scheduler_dedup.localrun.simulation.scheduler_api import SchedulerApi
from scheduler_dedup.localrun.simulation.store import FaultPlan, FaultyDocs, FaultyStore
from scheduler_dedup.localrun.simulation.topic import SimTopic
from scheduler_dedup.localrun.simulation.work import staged_work
from scheduler_dedup.localrun.simulation.work_history import ItemWatch

# A job body checks its lease and reports progress this often while it works.
STEP = timedelta(seconds=20)
# No faults until the first audit has recorded every job's epoch.
QUIET = timedelta(minutes=2)
# Audits that must log their summary after every time settled (and no backfill request
# left queued), within SETTLE_CAP.
SETTLING_AUDITS = 2
SETTLE_CAP = timedelta(hours=12)
# The dead-letter topic (`dead_letters`), and the share of its publishes that fail or
# store and lose their answer.
DEAD_LETTER_TOPIC = "projects/sim-project/topics/sim-dead-letters"
PUBLISH_FAULTS = 0.15
# The share of reported failures the operator reruns with --only failed (`operator_skew`).
RERUN_SHARE = 0.5


class World:
    def __init__(self, scenario: Scenario, inner: Any, history: History) -> None:
        self.scenario = scenario
        self.loop = Loop(scenario.start)
        self.history = history
        self.rng = scenario.rng
        self.faults = FaultPlan(
            scenario.rng,
            scenario.fault_rate,
            scenario.outages,
            scenario.spared,
            scenario.partition_rate,
            scenario.start + QUIET,
            "audit_crash_after_save" in scenario.features,
            scenario.lost_claims,
            healed_at=scenario.settle,
        )
        if scenario.deploys is not None:  # `deploy_in_flight`: its job's epochs, told
            inner = deploys.EpochsSeen(inner, history.deploys, lambda: self.loop.now)
        self.inner = _SuspensionsSeen(inner, self._suspension_written)
        inner = self.inner
        self.store = FaultyStore(
            ItemWatch(inner, history.work, lambda: self.loop.now),
            self.loop,
            self.faults,
            self._written,
            lambda key, task: history.refused(key, task, self.loop.now),
        )
        self.docs = FaultyDocs(inner.backfills(), self.loop, self.faults)
        # `region_outage`: every region's Scheduler, the first one drawing from the seed's
        # generator as a stack in one region does, the others from the class's own.
        self.schedulers = {
            region: CloudScheduler(
                self.loop,
                scenario.rng if region == scenario.region else regions.rng(scenario.seed, region),
                functools.partial(self._send, region),
                scenario.lost_answers,
                scenario.duplicates,
            )
            for region in scenario.regions
        }
        self.scheduler: CloudScheduler | regions.AllRegions = self.schedulers[scenario.region]
        if len(scenario.regions) > 1:
            self.scheduler = regions.AllRegions(self.schedulers)
        self._ids = itertools.count(1)
        self._requests = itertools.count(1)
        self.paused_in_stack: set[str] = set()
        self.settle_cap = scenario.settle + SETTLE_CAP
        self.stopped = scenario.start  # where the clock stood when the world stopped
        # `pause_api_versions`, `unreadable_scheduler`: the audit reads Scheduler and its
        # log through the real REST code, answered by the world (`scheduler_api`).
        self.api = SchedulerApi(
            self.scheduler,
            scenario.rng,
            scenario.project,
            scenario.region,
            lambda: self.loop.now,
            scenario.api_versions,
            scenario.api_fault_rate,
            scenario.log_lags_s,
        )
        self.topic = SimTopic(
            scenario.rng,
            PUBLISH_FAULTS,
            lambda: self.loop.now,
            self._letter_stored,
            scenario.settle,
        )
        # `region_outage`: each other region's Scheduler answers its own REST calls.
        self.apis = {scenario.region: self.api} | {
            region: SchedulerApi(
                self.schedulers[region],
                regions.rng(scenario.seed, f"{region}-api"),
                scenario.project,
                region,
                lambda: self.loop.now,
                scenario.api_versions,
                scenario.api_fault_rate,
                scenario.log_lags_s,
            )
            for region in scenario.regions[1:]
        }
        # `deploy_in_flight`: the class's job as the stack has it, and the revision's settings.
        self.deployed = deploys.start(scenario, history, self.settle_cap)
        self.settings = scenario.settings
        self.apps: dict[str, Any] = {region: self._deploy(region) for region in scenario.regions}

    # -- the handler, as a deploy builds it --

    def env(self, region: str | None = None) -> dict[str, str]:
        """The environment the program sets on `region`'s function (None: the first's)."""
        entries = [self._entry(job) for job in self._stack_jobs()]
        letters = "dead_letters" in self.scenario.features
        topic = {DEAD_LETTER_TOPIC_ENV: DEAD_LETTER_TOPIC} if letters else {}
        scenario = self.scenario
        settings = regions.region_settings(
            self.settings, scenario.regions, region or scenario.region
        )
        return {
            **settings.to_env(),
            **audit_env(entries, self.scenario.lookback_s, self.scenario.audit.id),
            **topic,
        }

    def _stack_jobs(self) -> list[SimJob]:
        return [*self.scenario.jobs, *self.deployed]

    def _entry(self, job: SimJob) -> dict[str, object]:
        return schedule_entry(
            job.id,
            job.schedule,
            job.time_zone,
            retry_window_s=job.retry.retry_window_s(job.deadline.total_seconds()),
            attempt_deadline_s=int(job.deadline.total_seconds()),
            catch_up=job.catch_up,
            catch_up_max_age_s=(
                self.scenario.ttl.catch_up_max_age_s
                if job.catch_up and self.scenario.ttl is not None
                else None
            ),
            paused=job.id in self.paused_in_stack,
            overlap=job.overlap,
            start_at=job.start_at,
            end_at=job.end_at,
            suspend_after=job.suspend_after,
        )

    def _deploy(self, region: str, env: dict[str, str] | None = None) -> App:
        """`region`'s handler revision from the stack's environment (or `env`), built by
        `App.from_env`.

        Everything but the store, the fake clock (time, monotonic time, sleep), attempt
        ids, renewals and Scheduler's listing comes from the environment, as deployed.
        """
        store: Any = self.store
        docs: Any = self.docs
        if len(self.scenario.regions) > 1:  # `region_outage`: its instances may lose them
            store = regions.RegionStore(self.store, region, lambda r: self._out(r, "store"))
            docs = regions.RegionStore(self.docs, region, lambda r: self._out(r, "store"))
        return App.from_env(
            self.env(region) if env is None else env,
            self.loop.clock,
            jobs={job.id: self._body(job) for job in self._stack_jobs()},
            store_factory=lambda: store,
            renewals=LoopRenewals(self.loop),
            new_attempt_id=lambda: f"a{next(self._ids)}",
            monotonic=lambda: self.loop.now.timestamp(),
            sleep=lambda seconds: self.loop.sleep(timedelta(seconds=seconds)),
            live=self._audit_listing,
            backfills=lambda: docs,
            dead_letter_topic=lambda: self.topic,
        )

    def _listing(self, since: datetime) -> dict[str, ListedJob]:
        """Scheduler's listing with each job's pauses and resumes since `since` (its log)."""
        return {
            job.id: ListedJob(
                job.id, job.paused, job.schedule, job.time_zone, history_unread=""
            ).logged([change for change in job.changes if change.at >= since], since)
            for job in self.scheduler.jobs.values()
        }

    def _audit_listing(self, since: datetime) -> dict[str, ListedJob]:
        """What the audit lists: through the REST code when a class of issue 35 asks it,
        or every region's Scheduler, each through its own REST answers (`region_outage`)."""
        scenario = self.scenario
        if len(scenario.regions) > 1:
            listers = {
                region: functools.partial(
                    session_listing,
                    regions.RegionApi(
                        self.apis[region], functools.partial(self._out, region, "scheduler")
                    ),
                    scenario.project,
                    region,
                )
                for region in scenario.regions
            }
            return regional_lister(listers)(since)
        if self.scenario.api_versions == ("v1",) and not self.scenario.api_fault_rate:
            return self._listing(since)
        return session_listing(self.api, self.scenario.project, self.scenario.region, since)

    def _out(self, region: str, kind: str) -> bool:
        """Whether `region` is out in the way `kind` says now (`regions.KINDS`)."""
        now = self.loop.now
        return any(o.covers(region, kind, now) for o in self.scenario.region_outages)

    def _written(self, key: str, record: Any) -> None:
        self.history.record_written(self.loop.now, key, record)

    def _suspension_written(self, suspension: Suspension) -> None:
        self.history.suspension_written(self.loop.now, suspension)

    def suspend(self, job_id: str, suspended: bool) -> None:
        """`ops suspend` / `ops resume` from the operator's laptop (refused: nothing happens)."""
        now = self.loop.now + self.scenario.operator_skew
        key = suspension_key(self.scenario.project, self.scenario.region, job_id)
        if suspended:
            step = suspended_by("sim: partner outage", "operator@sim", now)
        else:
            step = resumed_by("sim: fixed", "operator@sim", now)
        try:
            change(self.inner, key, job_id, step)
        except SuspensionRefused as exc:
            self.history.event(self.loop.now, f"operator refused: {exc}")

    def _letter_stored(self, now: datetime, attributes: dict[str, str]) -> None:
        self.history.letter_stored(now, attributes)

    # -- deliveries and job bodies --

    def _send(
        self,
        region: str,
        job: str,
        stamped: datetime | None,
        forced: bool,
        answer: Callable[[int], None],
    ) -> None:
        settings = self.scenario.settings
        headers = scheduler_headers(
            job,
            stamped,
            self.scenario.project,
            region,
            project_header=settings.project_header,
            region_header=settings.region_header,
        )
        if self._out(region, "scheduler"):  # `region_outage`
            return  # the region's Scheduler sends nothing
        app = self.apps[region]
        # `region_outage`: the function answers 503, or works on while its answer never
        # reaches Scheduler (a timeout: the attempt deadline fails it).
        refused = self._out(region, "5xx")
        unanswered = self._out(region, "timeout")
        where = f" in {region}" if len(self.scenario.regions) > 1 else ""
        # Mostly near the bound, where a takeover margin that is too small shows.
        skew = self.scenario.skew * self.rng.choice((-1, 1)) * self.rng.uniform(0.5, 1)

        def request(task: Task) -> None:
            kind = ("forced delivery" if forced else "delivery") + where
            if stamped is not None:
                self.history.note(job, stamped, self.loop.now, f"{kind} arrives ({task.name})")
            if refused:
                if stamped is not None:
                    self.history.note(job, stamped, self.loop.now, f"{kind} answered 503 (outage)")
                answer(503)
                return
            response = app.handle("POST", headers, b"")
            if response.outcome == "lease_lost":  # the final write refused: the lease was lost
                self.history.lease_lost(task, job, self.loop.now)
            if stamped is not None:
                text = f"{kind} answered {response.status} {response.outcome}"
                self.history.note(job, stamped, self.loop.now, text)
            if not unanswered:
                answer(response.status)

        task = self.loop.spawn(f"request-{next(self._requests)}", skew, request)
        timeouts.arm(self, task, job, stamped, answer)  # `request_timeout`

    def _body(self, job: SimJob) -> Callable[[RunContext], None]:
        def run(context: RunContext) -> None:
            execution = self.history.started(context, self.loop.now, self.loop.current)
            try:
                self._work(job, context, execution)
            except LeaseLost:
                execution.lease_lost_at = self.loop.now
                raise
            finally:
                self.history.ended(execution, self.loop.now)

        return run

    def _work(self, job: SimJob, context: RunContext, execution: Execution) -> None:
        """Work in steps, checking the lease before each; then fail or take effect."""
        work = timedelta(seconds=self.rng.uniform(*job.work_s))
        stages = self.scenario.staged.get(job.id)
        if stages:  # `job_work`: the work in checkpointed stages, the effect an output
            staged_work(self, job, context, execution, work, stages)
            return
        self.steps(context, execution, work)
        self.maybe_fail(job, execution)
        execution.outcome = "effect"
        execution.effect_at = self.loop.now

    def steps(self, context: RunContext, execution: Execution, work: timedelta) -> None:
        """`work` in steps of at most STEP, checking the lease before each and after the last."""
        while True:
            context.ensure_lease()
            execution.held.append(self.loop.now)
            if work <= timedelta(0):
                break
            step = min(STEP, work)
            self.loop.sleep(step)
            work -= step

    def maybe_fail(self, job: SimJob, execution: Execution) -> None:
        """Fail terminally or retryably at the job's rates."""
        draw = self.rng.random()
        if draw < job.terminal:
            execution.outcome = "failed"
            raise TerminalJobError("simulated terminal failure")
        if draw < job.terminal + job.retryable:
            execution.outcome = "error"
            raise RuntimeError("simulated retryable failure")

    # -- what the operator and the stack do --

    def redeploy(self, paused: set[str]) -> None:
        self.paused_in_stack = set(paused)
        self.apps = {region: self._deploy(region) for region in self.scenario.regions}

    def backfill(
        self,
        job_id: str,
        start: datetime,
        end: datetime,
        mode: str,
        newest_first: bool = False,
    ) -> None:
        """`python -m runledger.ops backfill` from the operator's laptop, then a forced audit."""
        now = self.loop.now + self.scenario.operator_skew
        env = self.env()
        settings = Settings.from_env(env)
        audit = audit_settings(env, settings)
        schedule = audit.schedule(job_id)
        assert schedule is not None
        line = job_timeline(self._listing, schedule, start)

        def planned_at(moment: datetime) -> Plan:
            return plan(
                schedule,
                start,
                end,
                self.inner.get_many,
                audit.project,
                audit.region,
                mode,
                moment,
                line,
                newest_first,
            )

        # What the operator's laptop plans, and what the world's own clock says is due.
        planned, truth = planned_at(now), planned_at(self.loop.now)
        order = " newest first" if newest_first else ""
        text = f"backfill {job_id} [{start:%H:%M}, {end:%H:%M}) --only {mode}{order}"
        # A completed time's rerun is a run of its own generation, checked by its key below.
        times = [r.schedule_time for r in truth.runs if not r.generation]
        self.history.backfill_asked(
            self.loop.now, job_id, times, text, include_failed=mode != MODE_MISSING
        )
        key = queue.request_key(
            audit.project, audit.region, job_id, start, end, mode, newest_first, planned.runs
        )
        docs = self.inner.backfills()
        if docs.get(key) is None and not planned.runs:
            return
        document = queue.request_document(
            job_id, start, end, mode, planned.runs, now, "operator@sim", newest_first
        )
        created, _ = queue.record_request(docs, audit.project, audit.region, key, document)
        if created:
            self.history.reruns_asked(
                self.loop.now,
                [
                    (
                        job_id,
                        run.schedule_time,
                        generation_key(
                            job_id, run.schedule_time, audit.project, audit.region, run.generation
                        ),
                    )
                    for run in planned.runs
                    if run.generation
                ],
            )
        self.scheduler.force(self.scenario.audit.id, stamped=self.rng.random() < 0.5)

    def rerun_failure(self, job_id: str, when: datetime) -> None:
        """The operator reruns half the terminal failures, minutes after (`operator_skew`)."""
        if "operator_skew" not in self.scenario.features or self.rng.random() >= RERUN_SHARE:
            return
        if when > self.scenario.end:  # the operator looks after the window judged
            return
        job = next((job for job in self.scenario.jobs if job.id == job_id), None)
        if job is None or job.overlap != "allow":  # not `deploy_in_flight`'s job: it may go
            return
        end = when + timedelta(minutes=1)
        text = f"operator reruns the failure of {job_id} at {when:%H:%M}"
        self.history.event(self.loop.now, text)
        later = timedelta(minutes=self.rng.randint(2, 6))
        self.loop.after(later, lambda: self.backfill(job_id, when, end, MODE_FAILED))

    def run(self) -> None:
        """Play the scenario to its settle time; every log line goes to the history."""
        lines = _FindingLines(self)
        with contextlib.redirect_stdout(lines):
            for job in [*self.scenario.jobs, self.scenario.audit]:
                live = LiveJob(
                    job.id,
                    job.schedule,
                    job.time_zone,
                    job.deadline,
                    job.retry,
                )
                # The audit from the start itself: it records the epochs. Every job fires
                # until the world stops, as a deployed stack's do: only (start, end] is
                # judged, and a job gone quiet at the end would leave each later audit
                # more catch-up than it can run (docs/reliability.md, "Settled").
                audit = job is self.scenario.audit
                begin = self.scenario.start - timedelta(seconds=1 if audit else 0)
                self.scheduler.add(live, begin, self.settle_cap)
            for when, action in self.scenario.actions:
                self.loop.at(when, lambda action=action: action(self))
            self.loop.at(self.scenario.start, lambda: ttl.sweep(self))  # `ttl_deletion`
            self.loop.run_until(self.scenario.settle)
            while not self._settled():
                if self.loop.now >= self.settle_cap:
                    self.history.event(
                        self.loop.now, "never settled: too few audits logged, or backfills pending"
                    )
                    self.history.unsettled = True
                    break
                self.loop.run_until(self.loop.now + timedelta(minutes=10))
            self.stopped = self.loop.now
            self.loop.drain()
        self.history.settle()
        self.history.crashes.extend(self.loop.crashes)

    def _settled(self) -> bool:
        """Two audits logged since the settle time, the last with no time waiting for the
        pause log, and no backfill request is left pending.

        A backfill runs its times one after another inside audits: one of many long
        times may outlast the two audits, and the world must not stop it half-way. A
        time waiting for the pause log is judged by a later audit (seed 122 of
        `deploy_in_flight`: the audit's documents deleted, its sightings with them).
        """
        if self.history.summaries_since(self.scenario.settle) < SETTLING_AUDITS:
            return False
        if self.history.awaiting_log:
            return False
        found = self.inner.backfills().get(
            queue.queue_key(self.scenario.project, self.scenario.region)
        )
        return found is None or not found[0].get("pending")


class _SuspensionsSeen:
    """The store, telling the history each suspension document the moment it is written.

    Below the faults: a write whose answer is lost has landed, and is told so.
    """

    def __init__(self, inner: Any, written: Callable[[Suspension], None]) -> None:
        self._inner = inner
        self._written = written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create_suspension(self, key: str, suspension: Suspension) -> Any:
        version = self._inner.create_suspension(key, suspension)
        self._written(suspension)
        return version

    def replace_suspension(self, key: str, suspension: Suspension, version: Any) -> Any:
        result = self._inner.replace_suspension(key, suspension, version)
        self._written(suspension)
        return result


class _FindingLines(io.TextIOBase):
    """Stdout while a seed runs: the audit's finding lines go to the history, the rest away.

    A terminal failure's ERROR line may have the operator rerun it (`World.rerun_failure`).
    """

    def __init__(self, world: World) -> None:
        self._world = world

    def write(self, text: str) -> int:
        if '"outcome": "run_' in text or '"outcome": "job_' in text or "audit_summary" in text:
            self._world.history.finding_line(self._world.loop.now, text, self._world.loop.current)
        if '"outcome": "backfill_past_retention"' in text:  # `ttl_deletion`
            entry = json.loads(text)
            when = parse_schedule_time(entry["schedule_time"])
            self._world.history.backfill_past_retention(entry["job"], when, self._world.loop.now)
        if '"outcome": "dead_letter_unpublished"' in text:
            entry = json.loads(text)
            self._world.history.letter_unpublished(self._world.loop.now, entry["run_key"])
        if '"outcome": "failed_terminal"' in text:  # the ERROR line an alert shows at once
            entry = json.loads(text)
            if not entry.get("manual"):
                when = parse_schedule_time(entry["schedule_time"])
                self._world.rerun_failure(entry["job"], when)
        return len(text)
