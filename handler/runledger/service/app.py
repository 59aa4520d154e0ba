"""One delivery in, one status code out: the handler's logic, free of any web framework.

Status codes follow what Cloud Scheduler does with them: any 2xx ends the
run's retries, anything else keeps them going within the job's retry policy.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from runledger import facts
from runledger.config import Settings, check_contract
from runledger.delivery.dead_letter import DeadLetters, Topic
from runledger.delivery.deadline import attempt_deadlines, outlived_deadline
from runledger.delivery.duplicate_wait import DuplicateWait
from runledger.delivery.identify import Delivery, identify_delivery, unstamped_window
from runledger.delivery.invoker import check_invoker
from runledger.delivery.log import log_line
from runledger.delivery.pipeline import RunPipeline, Trigger
from runledger.delivery.pubsub_topic import pubsub_topic
from runledger.delivery.responses import Response, store_response
from runledger.exceptions import BadRequest, StoreUnavailable
from runledger.facts import OVERLAP_ALLOW
from runledger.ledger.lease import Renewals, RenewalScheduler
from runledger.ledger.machine import Ledger
from runledger.ledger.run import RunIdentity
from runledger.ledger.store import RunStore
from runledger.schedules import AuditSettings, audit_settings, check_jobs
from runledger.sdk.registry import JobFn, load_jobs
from runledger.service.audit_job import audit_job

if TYPE_CHECKING:
    from runledger.audit.scheduler_state import Lister, LiveJob
    from runledger.backfill.queue import BackfillDocs

MAX_BODY_BYTES = 1024 * 1024
_SEVERITY = {2: "INFO", 4: "WARNING", 5: "ERROR"}


def configured_wait(
    settings: Settings,
    audit: AuditSettings,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> DuplicateWait | None:
    """The duplicate wait DEDUP_DUPLICATE_WAIT_SECONDS asks for, bounded by each job's deadline."""
    if settings.duplicate_wait == timedelta(0):
        return None
    deadlines = {schedule.id: schedule.attempt_deadline for schedule in audit.schedules}
    return DuplicateWait(deadlines, settings.lease, settings.duplicate_wait, monotonic, sleep)


def dead_letters(settings: Settings, topic: Callable[[], Topic] | None) -> DeadLetters | None:
    """DEDUP_DEAD_LETTER_TOPIC's dead letters, on Pub/Sub unless `topic` stands in for it."""
    name = settings.dead_letter_topic
    if name is None:
        return None
    return DeadLetters(name, pubsub_topic(name) if topic is None else topic, settings.database)


# The audit's Scheduler listing and backfill requests are built from the environment
# at start-up, but their modules load on the audit's first use: every cold start
# serves deliveries of ordinary jobs first, and those never need them.
def _scheduler_listing(project: str, region: str, env: Mapping[str, str]) -> Lister:
    """`runledger.audit.scheduler_state.scheduler_lister`, imported on the first listing."""

    def listing(since: datetime) -> dict[str, LiveJob]:
        from runledger.audit.scheduler_state import scheduler_lister

        return scheduler_lister(project, region, env)(since)

    return listing


def _schedule_listing(project: str, regions: tuple[str, ...], env: Mapping[str, str]) -> Lister:
    """The schedule's live jobs: its one region's listing, or every region's
    (`runledger.audit.regions`, imported on the first listing)."""
    if len(regions) == 1:
        return _scheduler_listing(project, regions[0], env)

    def listing(since: datetime) -> Mapping[str, LiveJob]:
        from runledger.audit.regions import regional_lister

        by_region = {region: _scheduler_listing(project, region, env) for region in regions}
        return regional_lister(by_region)(since)

    return listing


def _backfill_docs(settings: Settings) -> Callable[[], BackfillDocs]:
    """`runledger.backfill.queue.firestore_backfills`, imported on the first read."""
    made: list[Callable[[], BackfillDocs]] = []

    def docs() -> BackfillDocs:
        if not made:
            from runledger.backfill.queue import firestore_backfills

            made.append(firestore_backfills(settings))
        return made[0]()

    return docs


class App:
    def __init__(
        self,
        settings: Settings,
        jobs: Mapping[str, JobFn],
        store_factory: Callable[[], RunStore],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        new_attempt_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        renewals: Renewals | None = None,
        duplicate_wait: DuplicateWait | None = None,
        zones: Mapping[str, ZoneInfo] | None = None,
        overlaps: Mapping[str, str] | None = None,
        audit: AuditSettings | None = None,
        live: Lister | None = None,
        backfills: Callable[[], BackfillDocs] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        dead_letters: DeadLetters | None = None,
    ) -> None:
        """`audit` (None: no audit) is served under its own job id (`audit.job`) next to `jobs`.

        `live` lists the audited jobs' live state (None: Scheduler is not asked);
        `backfills` gives the backfill requests the audit runs (None: no backfill pass);
        `monotonic` times each request (its log line, the duplicate wait's budget);
        `dead_letters` is where final failures are published (None: nowhere).
        """
        self.settings = settings
        self.jobs = jobs
        if audit is not None:
            run_audit = audit_job(
                audit,
                lease=settings.lease,
                ledger=lambda: self.ledger,
                catch_up=lambda run, trigger: self.catch_up(run, trigger).outcome,
                live=live,
                backfills=backfills,
                jobs=jobs,
                dead_letters=dead_letters,
            )
            self.jobs = {**jobs, audit.job: run_audit}
        self._store_factory = store_factory
        self._clock = clock
        self._new_attempt_id = new_attempt_id
        # Every run of this App renews its lease on the same few threads.
        self._pipeline = RunPipeline(
            lambda: self.ledger,
            lambda: self.jobs,
            clock,
            RenewalScheduler() if renewals is None else renewals,
            monotonic,
            dead_letters=dead_letters,
            windows={
                schedule.id: schedule
                for schedule in (audit.schedules if audit is not None else ())
                if schedule.windowed
            },
            suspend_after={
                schedule.id: schedule.suspend_after
                for schedule in (audit.schedules if audit is not None else ())
                if schedule.suspend_after is not None
            },
        )
        self._monotonic = monotonic
        self._ledger: Ledger | None = None
        self._ledger_lock = threading.Lock()
        # None: an in-progress duplicate is answered 409 at once.
        self._duplicate_wait = duplicate_wait
        # Each scheduled job's time zone (DEDUP_SCHEDULES): a wall time the clocks repeat
        # is one run (`delivery.wall_time_instant`).
        self.zones = dict(zones or {})
        # Each scheduled job's overlap policy (DEDUP_SCHEDULES; absent: allow).
        self.overlaps = dict(overlaps or {})
        self.deadlines = attempt_deadlines(audit)  # a run that outlives one is logged as such
        # The body each scheduled job's deliveries carry (DEDUP_SCHEDULES), which the
        # runs the audit starts itself (catch-up, backfill) hand to the job too.
        self.bodies = {
            schedule.id: schedule.body.encode()
            for schedule in (audit.schedules if audit is not None else ())
            if schedule.body is not None
        }

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        *,
        jobs: Mapping[str, JobFn] | None = None,
        store_factory: Callable[[], RunStore] | None = None,
        renewals: Renewals | None = None,
        new_attempt_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        live: Lister | None = None,
        backfills: Callable[[], BackfillDocs] | None = None,
        dead_letter_topic: Callable[[], Topic] | None = None,
    ) -> App:
        """Validate every setting now; connect to Firestore only on the first delivery.

        The one way to build the handler from DEDUP_*: the deployed handler calls it
        with the environment alone; every model of it (`runledger.testing.JobHarness`,
        the simulator, tests) passes its own `jobs` (None: DEDUP_JOBS_MODULE's), store
        and clock, so overlap policies, time zones, bodies and the duplicate wait come
        from the same DEDUP_SCHEDULES the handler reads. With a store injected, Cloud
        Scheduler is asked only through an injected `live` and backfill requests are
        read only from an injected `backfills` (both live in the cloud); without one,
        the environment's are used. `clock` is the deployed handler's real time; the
        local demo shifts it (`scheduler_dedup.localrun.clocked_handler`); the simulator
        runs it all on a fake clock, `monotonic` and `sleep` (the duplicate wait's polls)
        and `new_attempt_id` included. An environment of another contract version than
        this handler's (`DEDUP_CONTRACT_VERSION`) is refused first. With
        DEDUP_DEAD_LETTER_TOPIC set, final failures go to that topic (`dead_letter_topic`,
        if given, stands in for Pub/Sub).
        """
        check_contract(env)
        settings = Settings.from_env(env)
        served = load_jobs(settings.jobs_module) if jobs is None else jobs
        audit = audit_settings(env, settings)
        check_jobs(audit, served, settings.jobs_module)
        cloud = store_factory is None

        def firestore_store() -> RunStore:
            from google.cloud import firestore

            from runledger.ledger.firestore_store import FirestoreRunStore

            client = firestore.Client(database=settings.database)
            return FirestoreRunStore(client, settings.collection)

        if cloud and live is None:
            live = _schedule_listing(audit.project, audit.scheduler_regions, env)
        if cloud and backfills is None and audit.schedules:
            backfills = _backfill_docs(settings)
        return cls(
            settings,
            served,
            firestore_store if store_factory is None else store_factory,
            clock=clock,
            new_attempt_id=new_attempt_id,
            renewals=renewals,
            duplicate_wait=configured_wait(settings, audit, monotonic, sleep),
            zones={schedule.id: schedule.zone for schedule in audit.schedules},
            overlaps={schedule.id: schedule.overlap for schedule in audit.schedules},
            audit=audit,
            live=live,
            backfills=backfills,
            monotonic=monotonic,
            dead_letters=dead_letters(settings, dead_letter_topic),
        )

    @property
    def ledger(self) -> Ledger:
        with self._ledger_lock:
            if self._ledger is None:
                store = self._store_factory()
                commits = None
                if any(policy != OVERLAP_ALLOW for policy in self.overlaps.values()):
                    from runledger.ledger.overlap import SlotCommits

                    commits = SlotCommits(store, self.overlaps)
                self._ledger = Ledger(
                    store,
                    commits=commits,
                    lease=self.settings.lease,
                    retention=self.settings.retention,
                    clock=self._clock,
                    new_attempt_id=self._new_attempt_id,
                    heartbeat=self.settings.heartbeat,
                )
            return self._ledger

    def handle(self, method: str, headers: Iterable[tuple[str, str]], body: bytes) -> Response:
        started = self._monotonic()
        fields: dict[str, object] = {}
        response = self._respond(method, list(headers), body, fields, started)
        elapsed_s = self._monotonic() - started
        fields.update(outlived_deadline(fields, elapsed_s, self.deadlines))
        log_line(
            _SEVERITY.get(response.status // 100, "INFO"),
            response.message,
            outcome=response.outcome,
            status=response.status,
            duration_ms=round(elapsed_s * 1000, 1),
            **fields,
        )
        return response

    def _respond(
        self,
        method: str,
        headers: list[tuple[str, str]],
        body: bytes,
        fields: dict[str, object],
        started: float,
    ) -> Response:
        if method.upper() != "POST":
            return Response(405, "rejected", f"method {method[:10]!r} not allowed; use POST")
        if len(body) > MAX_BODY_BYTES:
            return Response(413, "rejected", f"body larger than {MAX_BODY_BYTES} bytes")
        try:
            check_invoker(
                headers, self.settings.allowed_invokers, self.settings.allowed_invoker_ids
            )
            delivery = identify_delivery(
                headers, self.settings, self.jobs, self._clock(), self.zones
            )
        except BadRequest as exc:
            return Response(exc.status, "rejected", exc.reason)
        try:
            run = self._joined(delivery, fields)
        except StoreUnavailable as exc:
            return store_response(exc, "ledger unavailable before claim")
        fields.update(
            run_key=run.key,
            job=run.job,
            schedule_time=run.schedule_time.isoformat(),
            manual=run.manual,
            trigger=run.trigger,
            delivered_region=run.delivered_region,
        )
        return self._pipeline.run(run, Trigger(body, self._duplicate_wait, started), fields)

    def catch_up(self, run: RunIdentity, trigger: str = facts.TRIGGER_CATCH_UP) -> Response:
        """Run a scheduled run the audit found missed or released, through the one pipeline.

        A late Scheduler retry of the same run races this on the one claim, so
        exactly one of them runs the job. The job gets the body its Scheduler job
        sends, as DEDUP_SCHEDULES says (none: empty). `trigger` says who asked
        (the catch-up, or a backfill request: `runledger.backfill.runs`); such a
        run never waits for a duplicate, and one that meets a running holder of
        its job stays pending for a later audit (`overlap_delayed`, nothing written),
        a backfill's run after waiting for that holder as a duplicate delivery of
        its job would (`RunPipeline._await_holder`).
        """
        run = replace(run, trigger=trigger)
        wait = self._duplicate_wait if trigger == facts.TRIGGER_BACKFILL else None
        start = Trigger(self.bodies.get(run.job, b""), holder_wait=wait)
        return self._pipeline.run(run, start, {})

    def _joined(self, delivery: Delivery, fields: dict[str, object]) -> RunIdentity:
        """The run an unstamped forced run's copy belongs to: the earlier window's, if it began.

        Copies are recognised as one run for at least one window after the first
        arrived and at most two; a copy arriving later runs the job again. The
        window goes to the log line so a repeat can be explained.
        """
        if delivery.earlier is None:
            return delivery.run
        window = int(unstamped_window(self.settings).total_seconds())
        fields["unstamped_forced_run_window_s"] = window
        found = self.ledger.read(delivery.earlier.key)
        if found is not None and not found.is_expired(self._clock()):
            return delivery.earlier
        return delivery.run
