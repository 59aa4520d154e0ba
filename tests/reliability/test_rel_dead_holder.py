"""Dead holders and lost claim answers, with the example stack's settings, through real servers.

The example stack is the machinery tests' fixture copy of it (tests/stacks.py),
never the repo's Pulumi.<stack>.yaml, which a team replaces with its own.

A claim's lease is the short heartbeat lease the stack deploys
(DEDUP_HEARTBEAT_SECONDS), renewed while the job runs. So a holder killed with
SIGKILL right after its job started, and a claim whose write landed but whose
answer never came back, block their run for one heartbeat lease (plus the
clock-skew margin) at most, and a Scheduler retry that comes 90 s later runs
the run, once, answering 200. A retry that arrived while the holder was still
thought alive waits, sees the lease run out, and runs the run itself. The cases
share the one real 90 s wait.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from google.cloud import firestore

from dedup_schedule.config.model import ScheduleConfig
from runledger.delivery.duplicate_wait import wait_budget
from runledger.delivery.identify import parse_schedule_time, run_key
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.record import Status
from scheduler_dedup.localrun.emulator import FirestoreEmulator
from tests.reliability.netfault import TcpLink
from tests.reliability.relsupport import Servers, deliver, effects, log_entries, wait_for
from tests.stacks import fixture_config

COLLECTION = "rel_dead_holder"
# When the retry that must redo both runs arrives, after the kill.
REDELIVERY_AFTER_S = 90


def _waiting_job(config: ScheduleConfig) -> str:
    """A job of the stack whose duplicates may wait longer than a dead holder's lease blocks it.

    The wait's budget ends inside the attempt deadline (runledger.wait), so only a
    job with a long enough deadline sees the lease run out while it waits.
    """
    lease = config.heartbeat_seconds or config.lease_seconds
    for job in config.jobs:
        budget = wait_budget(
            timedelta(seconds=job.attempt_deadline_s), timedelta(seconds=config.lease_seconds), None
        )
        if budget > lease + MAX_CLOCK_SKEW.total_seconds():
            return job.id
    raise AssertionError("no job of the example stack waits longer than a dead holder blocks it")


def _env(config: ScheduleConfig, emulator_env: dict[str, str], fault_dir: Path) -> dict[str, str]:
    """The handler's settings as `make plan` derives them; only where the ledger lives differs."""
    return {
        **config.handler_env(),
        **emulator_env,
        "DEDUP_DATABASE": "(default)",
        "DEDUP_COLLECTION": COLLECTION,
        "DEDUP_JOBS_MODULE": "tests.reliability.examplejobs",
        "REL_FAULT_DIR": str(fault_dir),
        "REL_PAUSE_LIMIT_S": "120",
    }


def _recent_runs(
    config: ScheduleConfig, count: int, only: str | None = None
) -> list[tuple[str, str]]:
    """(job, schedule time) of the stack's most recent scheduled runs, newest first."""
    now = datetime.now(UTC)
    found = []
    for job in config.jobs:
        if only is not None and job.id != only:
            continue
        times = croniter(job.schedule, now.astimezone(ZoneInfo(job.time_zone)))
        for _ in range(count):
            found.append((job.id, times.get_prev(datetime).astimezone(UTC)))
    found.sort(key=lambda pair: pair[1], reverse=True)
    return [(job, when.strftime("%Y-%m-%dT%H:%M:%SZ")) for job, when in found[:count]]


def _headers(config: ScheduleConfig, job: str, when: str) -> list[tuple[str, str]]:
    return [
        ("X-CloudScheduler-JobName", job),
        ("X-CloudScheduler-ScheduleTime", when),
        (config.project_header, config.project),
        (config.region_header, config.region),
    ]


def _key(config: ScheduleConfig, job: str, when: str) -> str:
    return run_key(job, parse_schedule_time(when), config.project, config.region, False)


def _by_attempt(fault_dir: Path, key: str) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for kind, run, attempt in effects(fault_dir):
        if run == key:
            rows.setdefault(attempt, []).append(kind)
    return rows


@pytest.mark.firestore
@pytest.mark.timeout(600)
def test_example_stack_redoes_killed_holders_and_a_lost_claim_answer_once(
    clean_emulator: FirestoreEmulator, fault_dir: Path, servers: Servers
) -> None:
    config = fixture_config()
    waiting_job = _waiting_job(config)
    heartbeat = config.heartbeat_seconds
    assert heartbeat is not None, "the example stack deploys a heartbeat lease"
    # Why 90 s is enough: a dead claim blocks its run one heartbeat lease plus the skew.
    assert heartbeat + MAX_CLOCK_SKEW.total_seconds() < REDELIVERY_AFTER_S
    store = FirestoreRunStore(firestore.Client(project=clean_emulator.project), COLLECTION)
    # The waited run is of a job whose wait outlasts the lease; the others of any job.
    ((waited_job, waited_at),) = _recent_runs(config, 1, only=waiting_job)
    others = [run for run in _recent_runs(config, 4) if run != (waited_job, waited_at)]
    (killed_job, killed_at), (lost_job, lost_at), (warm_job, warm_at) = others[:3]
    killed, lost = _key(config, killed_job, killed_at), _key(config, lost_job, lost_at)
    waited = _key(config, waited_job, waited_at)

    # 1. The holder of two runs dies (SIGKILL) right after their jobs started.
    env = _env(config, clean_emulator.env(), fault_dir)
    holder = servers.start(env | {"REL_PAUSE_AT": "during"})
    retry = servers.start(env)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        held = [
            pool.submit(deliver, holder.url, _headers(config, job, when))
            for job, when in ((killed_job, killed_at), (waited_job, waited_at))
        ]
        wait_for(
            lambda: {run for kind, run, _ in effects(fault_dir)} == {killed, waited},
            120,
            "both holders' jobs to start",
        )
        holder.kill()
        killed_monotonic = time.monotonic()
        for pending in held:
            with pytest.raises((ConnectionError, http.client.HTTPException)):
                pending.result(timeout=60)
        # A retry of one of them arrives at once: it waits for the holder's outcome.
        waiting = pool.submit(
            deliver, retry.url, _headers(config, waited_job, waited_at), timeout_s=180
        )
        stuck = store.get(killed)
        assert stuck is not None and stuck.record.status is Status.IN_PROGRESS
        assert stuck.record.lease_expires - stuck.record.claimed_at == timedelta(seconds=heartbeat)
        dead_attempt = stuck.record.attempt_id
        dead_waited = store.get(waited).record.attempt_id

        # 2. Meanwhile a claim lands but its answer is lost, and Firestore stays unreachable for
        #    the give-up too: the handler answers 5xx and the claim stands for one lease.
        with TcpLink.in_front_of(clean_emulator.host) as link:
            behind = servers.start(
                _env(
                    config,
                    {**clean_emulator.env(), "FIRESTORE_EMULATOR_HOST": link.host},
                    fault_dir,
                )
            )
            warm = deliver(behind.url, _headers(config, warm_job, warm_at))
            assert (warm.status, warm.outcome) == (200, "completed")  # the channel is open
            link.swallow_answers()
            with concurrent.futures.ThreadPoolExecutor(1) as lost_pool:
                pending = lost_pool.submit(
                    deliver, behind.url, _headers(config, lost_job, lost_at), timeout_s=90
                )
                wait_for(lambda: store.get(lost) is not None, 60, "the claim to land")
                landed_monotonic = time.monotonic()
                link.cut()
                unanswered = pending.result(timeout=90)
            link.restore()
        assert (unanswered.status, unanswered.outcome) == (503, "store_unavailable")
        assert "could not be given up" in unanswered.body["message"]
        landed = store.get(lost)
        assert landed is not None and landed.record.status is Status.IN_PROGRESS
        assert _by_attempt(fault_dir, lost) == {}, "the job never ran under the lost claim"

        took_over = waiting.result(timeout=180)
    # The wait saw the dead holder's lease run out and ran the run itself, once.
    assert (took_over.status, took_over.outcome) == (200, "completed")
    lines = [e for e in log_entries(retry.log()) if e.get("run_key") == waited]
    assert [e.get("took_over_from") for e in lines] == [dead_waited]
    by_waited = _by_attempt(fault_dir, waited)
    assert by_waited.pop(dead_waited) == ["begin"]
    assert list(by_waited.values()) == [["begin", "end"]]

    # 3. Scheduler's retries of both runs arrive 90 s after the kill and after the lost claim
    #    landed (on a loaded machine the second can come well after the first).
    redelivery = max(killed_monotonic, landed_monotonic) + REDELIVERY_AFTER_S
    time.sleep(max(0.0, redelivery - time.monotonic()))
    for job, when, key in ((killed_job, killed_at, killed), (lost_job, lost_at, lost)):
        reply = deliver(retry.url, _headers(config, job, when))
        assert (reply.status, reply.outcome) == (200, "completed"), (job, reply.body)
        again = deliver(retry.url, _headers(config, job, when))
        assert (again.status, again.outcome) == (200, "duplicate_completed")
        done = store.get(key)
        assert done is not None
        assert (done.record.status, done.record.attempts) == (Status.COMPLETED, 2)
    runs = _by_attempt(fault_dir, killed)
    assert runs.pop(dead_attempt) == ["begin"]
    assert list(runs.values()) == [["begin", "end"]], "redone once"
    assert list(_by_attempt(fault_dir, lost).values()) == [["begin", "end"]], "run once"
