"""`overlap: skip` in the real handler process: from DEDUP_SCHEDULES to the answer, and a
holder SIGKILLed in the middle of its run.

The served handler reads the job's policy from its DEDUP_SCHEDULES entry, as the
stack writes it; `crash-probe` pauses inside its work (REL_PAUSE_AT=during) so the
next scheduled time of the job certainly arrives while it runs.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.cloud import firestore

from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.record import Status
from scheduler_dedup.localrun.emulator import FirestoreEmulator
from tests.reliability.relsupport import (
    PROJECT,
    REGION,
    Servers,
    deliver,
    effects,
    probe_key,
    run_headers,
    schedule_time_now,
    server_env,
    wait_for,
)

JOB = "crash-probe"
COLLECTION = "rel_overlap"
# Long enough that the holder is certainly alive when the next time is delivered, on a
# loaded machine too (no heartbeat renews it); the test then waits it out once.
LEASE_S = 20


def skip_env(emulator: FirestoreEmulator, fault_dir: Path) -> dict[str, str]:
    entry = {
        "id": JOB,
        "schedule": "* * * * *",
        "timeZone": "UTC",
        "retryWindowSeconds": 180,
        "overlap": "skip",
    }
    return server_env(
        emulator,
        fault_dir,
        COLLECTION,
        lease_s=LEASE_S,
        DEDUP_SCHEDULES=json.dumps([entry]),
        DEDUP_ALLOWED_PROJECTS=PROJECT,
        DEDUP_ALLOWED_REGIONS=REGION,
    )


@pytest.mark.firestore
@pytest.mark.timeout(240)
def test_a_served_skip_job_skips_while_running_and_runs_after_its_holder_died(
    clean_emulator: FirestoreEmulator, fault_dir: Path, servers: Servers
) -> None:
    env = skip_env(clean_emulator, fault_dir)
    store = FirestoreRunStore(firestore.Client(project=clean_emulator.project), COLLECTION)
    first_time, second_time, third_time = (schedule_time_now(-offset) for offset in (120, 60, 0))

    first = servers.start(env | {"REL_PAUSE_AT": "during"})
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(deliver, first.url, run_headers(JOB, first_time))
        wait_for((fault_dir / "reached-during").exists, 60, "the first run to be inside its work")
        skipped = deliver(first.url, run_headers(JOB, second_time))
        assert (skipped.status, skipped.outcome) == (200, "overlap_skipped")
        record = store.get(probe_key(JOB, second_time)).record
        assert (record.status, record.yielded_to) == (Status.SKIPPED, probe_key(JOB, first_time))
        first.kill()  # the holder dies mid-run
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            pending.result(timeout=60)

    second = servers.start(env)
    dead = store.get(probe_key(JOB, first_time)).record
    # The dead holder counts as running until its lease (plus the skew margin) is over.
    wait_for(
        lambda: datetime.now(UTC) > dead.lease_expires + MAX_CLOCK_SKEW + timedelta(seconds=0.5),
        LEASE_S + 60,
        "the dead holder's lease to run out",
    )
    third = deliver(second.url, run_headers(JOB, third_time))
    assert (third.status, third.outcome) == (200, "completed")
    done = store.get(probe_key(JOB, third_time)).record
    ended = store.get(probe_key(JOB, first_time)).record
    # The takeover ended the dead holder's lease in the same commit as its claim.
    assert (ended.status, ended.lease_expires) == (Status.IN_PROGRESS, done.claimed_at)
    runs = {run for kind, run, _ in effects(fault_dir) if kind == "end"}
    assert len(runs) == 1  # the third time's; the first died before its end, the second never ran
    assert store.get(probe_key(JOB, third_time)).record.status is Status.COMPLETED
