"""SIGKILL the real handler process at each point of a run, then let delivery resume.

These go through the code `pulumi up` deploys: functions-framework serving
handler/main.py, the official Firestore emulator, and a jobs module that
records its work in an fsynced append-only file the ledger never sees. A
crash leaves an `in_progress` record; the tests prove the next delivery is
refused (409) only while that lease is live, then claims, runs and completes
the run, and that a duplicate afterwards does not run the work again.

The one seam the real server lacks - dying after the job returned but before
the completion write reached the store - is tested in-process at the end,
with a store wrapper that kills the attempt right at that write.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.memory_store import MemoryRunStore
from runledger.ledger.record import Status
from scheduler_dedup.localrun.emulator import FirestoreEmulator
from tests.handler.support import FakeClock, make_app, scheduler_headers
from tests.reliability.relsupport import (
    Crash,
    Fault,
    FaultyStore,
    Servers,
    deliver,
    effects,
    probe_run,
    server_env,
    wait_for,
)

LEASE_S = 2
COLLECTION = "rel_crash"


def _redeliver_until_done(
    url: str, headers: list, limit_s: float
) -> list[tuple[datetime, int, str]]:
    """Deliver like Scheduler's retries would, every 0.3 s, until a 2xx or the limit.

    Each delivery comes with the wall-clock time it was sent (the handler's clock too).
    """
    seen: list[tuple[datetime, int, str]] = []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        sent = datetime.now(UTC)
        reply = deliver(url, headers)
        seen.append((sent, reply.status, str(reply.outcome)))
        if 200 <= reply.status < 300:
            return seen
        time.sleep(0.3)
    raise AssertionError(f"run not completed within {limit_s} s: {seen}")


@pytest.mark.firestore
@pytest.mark.timeout(240)
@pytest.mark.parametrize("point", ["claimed", "during", "after_work"])
def test_sigkill_at_each_point_then_the_run_completes_once_after_the_lease(
    point: str, clean_emulator: FirestoreEmulator, fault_dir: Path, servers: Servers
) -> None:
    env = server_env(clean_emulator, fault_dir, COLLECTION, lease_s=LEASE_S)
    headers, key, store = probe_run(clean_emulator, COLLECTION)

    first = servers.start(env | {"REL_PAUSE_AT": point})
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(deliver, first.url, headers)
        wait_for((fault_dir / f"reached-{point}").exists, 60, f"the job to reach {point!r}")
        first.kill()
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            pending.result(timeout=60)

    stuck = store.get(key)
    assert stuck is not None and stuck.record.status is Status.IN_PROGRESS
    dead_attempt = stuck.record.attempt_id

    second = servers.start(env)
    seen = _redeliver_until_done(second.url, headers, limit_s=120)
    *refused, (_, final_status, final_outcome) = seen
    assert (final_status, final_outcome) == (200, "completed")
    # Before the takeover every delivery was told "in progress" - never 2xx, never 5xx.
    assert all(
        status == 409 and outcome == "duplicate_in_progress" for _, status, outcome in refused
    )

    done = store.get(key)
    assert done is not None
    assert done.record.status is Status.COMPLETED
    assert done.record.attempt_id != dead_attempt
    assert done.record.attempts == 2
    # The takeover waited for the dead lease plus the skew margin, and no longer: every
    # refused delivery was sent before that moment (the handler refuses only before it),
    # so no delivery sent after it was refused: the run was not left stuck.
    takeover_at = stuck.record.lease_expires + MAX_CLOCK_SKEW
    assert done.record.claimed_at >= takeover_at
    assert all(sent < takeover_at for sent, _, _ in refused), (takeover_at, refused)

    rows = effects(fault_dir)
    by_dead = [kind for kind, run, attempt in rows if attempt == dead_attempt]
    by_new = [kind for kind, run, attempt in rows if attempt == done.record.attempt_id]
    assert {run for _, run, _ in rows} <= {key}
    assert by_new == ["begin", "end"]
    expected_dead = {"claimed": [], "during": ["begin"], "after_work": ["begin", "end"]}[point]
    assert by_dead == expected_dead

    again = deliver(second.url, headers)
    assert (again.status, again.outcome) == (200, "duplicate_completed")
    assert effects(fault_dir) == rows, "a duplicate of a completed run must not run the work"


def test_crash_between_job_return_and_completion_write_is_retried_once(tmp_path: Path) -> None:
    """In-process: the attempt dies exactly at the completion write (no HTTP seam for it).

    The work ran but was never recorded, so after the lease the run is claimed
    again and its work runs a second time, under the same run_id: this is the
    at-least-once window every job must cover by passing run_id downstream as an
    idempotency token. The ledger records exactly one completion.
    """
    clock = FakeClock()
    store = FaultyStore(MemoryRunStore())
    ran: list[str] = []
    app = make_app(store, {"nightly-report": lambda ctx: ran.append(ctx.run_id)}, clock)

    store.arm(Fault("update", 1, "crash_before"))  # the completion write is update #1
    with pytest.raises(Crash):
        app.handle("POST", scheduler_headers(), b"")
    assert len(ran) == 1
    store.arm()

    clock.advance(seconds=299)
    refused = app.handle("POST", scheduler_headers(), b"")
    assert (refused.status, refused.outcome) == (409, "duplicate_in_progress")

    clock.advance(seconds=1 + MAX_CLOCK_SKEW.total_seconds())
    retried = app.handle("POST", scheduler_headers(), b"")
    assert (retried.status, retried.outcome) == (200, "completed")
    assert len(ran) == 2 and len(set(ran)) == 1, "both executions carry the same run_id"

    again = app.handle("POST", scheduler_headers(), b"")
    assert (again.status, again.outcome) == (200, "duplicate_completed")
    assert len(ran) == 2
