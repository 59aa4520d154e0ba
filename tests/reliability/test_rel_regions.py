"""A schedule in two regions: two real handler processes, one emulator, one run per time.

Each handler gets the environment the Pulumi program sets for its region
(`ScheduleConfig.handler_env(region)` of a two-region stack), so what is tested is
what `pulumi up` deploys: both regions' Schedulers deliver the same time, the
ledger makes it one run.
"""

from __future__ import annotations

import threading
from pathlib import Path

from google.cloud import firestore

from dedup_schedule.config.parser import parse_config
from runledger.delivery.identify import parse_schedule_time, run_key
from runledger.ledger.firestore_store import FirestoreRunStore
from scheduler_dedup.localrun.emulator import FirestoreEmulator
from tests.reliability.relsupport import (
    JOBS_MODULE,
    PROJECT,
    Reply,
    Servers,
    deliver,
    effects,
    log_entries,
    run_headers,
    schedule_time_now,
    wait_for,
)

FIRST, SECOND = "europe-west1", "europe-west4"
COLLECTION = "rel_regions"


def two_region_stack() -> dict[str, object]:
    return {
        "gcp:project": PROJECT,
        "gcp:region": FIRST,
        "scheduler-dedup:regions": [FIRST, SECOND],
        "scheduler-dedup:database": {"location": "eur3"},
        "scheduler-dedup:jobs": [
            {"id": "crash-probe", "schedule": "*/5 * * * *", "attemptDeadline": "120s"}
        ],
    }


def region_env(
    emulator: FirestoreEmulator, fault_dir: Path, region: str, **extra: str
) -> dict[str, str]:
    """What the program sets on `region`'s function, on the emulator and the test's jobs."""
    program = parse_config(two_region_stack()).handler_env(region)
    return {
        **program,
        **emulator.env(),
        "DEDUP_JOBS_MODULE": JOBS_MODULE,
        "DEDUP_COLLECTION": COLLECTION,
        "REL_FAULT_DIR": str(fault_dir),
        "REL_PAUSE_LIMIT_S": "60",
        **extra,
    }


def test_the_program_keys_both_regions_by_the_first(tmp_path):
    first = parse_config(two_region_stack()).handler_env(FIRST)
    second = parse_config(two_region_stack()).handler_env(SECOND)

    assert (first["DEDUP_ALLOWED_REGIONS"], second["DEDUP_ALLOWED_REGIONS"]) == (FIRST, SECOND)
    assert first["DEDUP_KEY_REGION"] == second["DEDUP_KEY_REGION"] == FIRST
    assert first["DEDUP_REGIONS"] == second["DEDUP_REGIONS"] == f"{FIRST},{SECOND}"


def test_one_time_delivered_by_both_regions_at_once_runs_once_and_both_answer_2xx(
    servers: Servers, clean_emulator: FirestoreEmulator, fault_dir: Path
):
    # Whichever handler claims first stops right after its claim until released, so
    # the other region's delivery surely meets the run in progress.
    handlers = {
        region: servers.start(region_env(clean_emulator, fault_dir, region, REL_PAUSE_AT="claimed"))
        for region in (FIRST, SECOND)
    }
    when = schedule_time_now()
    replies: dict[str, Reply] = {}

    def send(region: str) -> None:
        headers = run_headers("crash-probe", when, region=region)
        replies[region] = deliver(handlers[region].url, headers, timeout_s=120)

    threads = [threading.Thread(target=send, args=(region,)) for region in handlers]
    for thread in threads:
        thread.start()
    wait_for(lambda: (fault_dir / "reached-claimed").exists(), 60, "the winner's claim")
    (fault_dir / "release-claimed").touch()
    for thread in threads:
        thread.join(timeout=150)

    assert {region: reply.status for region, reply in replies.items()} == {FIRST: 200, SECOND: 200}
    assert [kind for kind, _, _ in effects(fault_dir)] == ["begin", "end"]
    key = run_key("crash-probe", parse_schedule_time(when), PROJECT, FIRST, manual=False)
    store = FirestoreRunStore(firestore.Client(project=clean_emulator.project), COLLECTION)
    found = store.get(key)
    assert found is not None and found.record.status.value == "completed"
    ran_in = found.record.delivered_region
    other = SECOND if ran_in == FIRST else FIRST
    assert replies[ran_in].outcome == "completed"
    lines = [e for e in log_entries(handlers[other].log()) if e.get("run_key") == key]
    assert [(e["status"], e.get("cross_region_duplicate")) for e in lines] == [(200, ran_in)]
