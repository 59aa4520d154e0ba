"""Sustained concurrent load on the real server: no 5xx, no double execution.

Client threads on loopback send a realistic mix for a bounded time: fresh runs
of eight jobs, about 30 % duplicates of runs already sent, and bursts of six
simultaneous deliveries of one new run. Every answer's latency is recorded. No
fault is injected, so any 5xx is a failure; the jobs count their executions in
a file the ledger never sees, and each run must have run exactly once.

REL_LOAD_SECONDS (default 8) sets the duration; on a loaded machine the load
goes on past it until MIN_SAMPLES answers came back (at most HARD_LIMIT_S), so
the test judges enough answers however slow the machine. REL_LOAD_REPORT names
a JSON file to write the measured numbers to (the README quotes such a run).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from scheduler_dedup.localrun.emulator import FirestoreEmulator
from tests.reliability.faultjobs import LOAD_JOBS
from tests.reliability.relsupport import (
    Servers,
    completed_work,
    deliver,
    probe_key,
    run_headers,
    server_env,
)

CLIENTS = 6
BURST_SIZE = 6
DUPLICATE_SHARE = 0.3
MIN_SAMPLES = 20
HARD_LIMIT_S = 120


@dataclass(frozen=True)
class Sample:
    key: str
    status: int
    outcome: str
    latency_s: float


class Mix:
    """Hands out deliveries: fresh runs, duplicates of sent runs, and burst runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._sent: list[tuple[str, str]] = []
        self._base = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=10)

    def fresh(self) -> tuple[str, str]:
        with self._lock:
            n = next(self._counter)
            run = (LOAD_JOBS[n % len(LOAD_JOBS)], self._time(n // len(LOAD_JOBS)))
            self._sent.append(run)
            return run

    def pick(self, rng: random.Random) -> tuple[str, str]:
        with self._lock:
            if self._sent and rng.random() < DUPLICATE_SHARE:
                return rng.choice(self._sent)
        return self.fresh()

    def sent(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(dict.fromkeys(self._sent))

    def _time(self, second: int) -> str:
        return (self._base - timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(run: tuple[str, str]) -> str:
    return probe_key(*run)


def _timed(url: str, run: tuple[str, str]) -> Sample:
    started = time.perf_counter()
    reply = deliver(url, run_headers(*run), timeout_s=90)
    return Sample(_key(run), reply.status, str(reply.outcome), time.perf_counter() - started)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@pytest.mark.firestore
@pytest.mark.timeout(420)
def test_sustained_mixed_load_has_no_5xx_and_runs_every_run_once(
    clean_emulator: FirestoreEmulator, fault_dir: Path, servers: Servers
) -> None:
    duration_s = float(os.environ.get("REL_LOAD_SECONDS", "8"))
    server = servers.start(server_env(clean_emulator, fault_dir, "rel_load", lease_s=60))
    mix = Mix()
    samples: list[Sample] = []
    samples_lock = threading.Lock()
    stop_at = time.monotonic() + duration_s
    hard_stop = time.monotonic() + max(duration_s, HARD_LIMIT_S)
    errors: list[BaseException] = []

    def keep(sample: Sample) -> None:
        with samples_lock:
            samples.append(sample)

    def going() -> bool:
        now = time.monotonic()
        with samples_lock:
            enough = len(samples) >= MIN_SAMPLES
        return now < hard_stop and (now < stop_at or not enough)

    def client(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while going():
                keep(_timed(server.url, mix.pick(rng)))
        except BaseException as exc:  # reported after the join, with the others
            errors.append(exc)

    def bursts() -> None:
        try:
            while going():
                run = mix.fresh()
                gate = threading.Barrier(BURST_SIZE)

                def one(run: tuple[str, str] = run, gate: threading.Barrier = gate) -> None:
                    gate.wait(timeout=60)
                    keep(_timed(server.url, run))

                wave = [threading.Thread(target=one) for _ in range(BURST_SIZE)]
                for thread in wave:
                    thread.start()
                for thread in wave:
                    thread.join(timeout=120)
                time.sleep(0.25)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(CLIENTS)]
    threads.append(threading.Thread(target=bursts))
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(duration_s, HARD_LIMIT_S) + 150)
    elapsed = time.monotonic() - started
    assert not errors, errors[:3]
    assert not any(thread.is_alive() for thread in threads)

    statuses = Counter((s.status, s.outcome) for s in samples)
    assert len(samples) >= MIN_SAMPLES, statuses
    assert not [s for s in samples if s.status >= 500], statuses
    assert set(statuses) <= {
        (200, "completed"),
        (200, "duplicate_completed"),
        (200, "duplicate_waited_completed"),  # a burst copy waited for the claimant
        (409, "duplicate_in_progress"),
    }, statuses

    completed_per_key = Counter(s.key for s in samples if s.outcome == "completed")
    executions = Counter(run for run, _ in completed_work(fault_dir))
    assert max(completed_per_key.values()) == 1
    assert max(executions.values()) == 1, "some run was executed twice"
    assert set(executions) == set(completed_per_key)

    # Afterwards every run sent is done: a redelivery is a duplicate and runs nothing.
    sent = mix.sent()
    for run in sent:
        again = deliver(server.url, run_headers(*run))
        assert (again.status, again.outcome) == (200, "duplicate_completed"), run
    assert Counter(run for run, _ in completed_work(fault_dir)) == executions
    assert len(executions) == len(sent)

    latencies = [s.latency_s for s in samples]
    report = {
        "duration_s": round(elapsed, 1),
        "clients": CLIENTS + 1,
        "requests": len(samples),
        "requests_per_s": round(len(samples) / elapsed, 1),
        "runs": len(sent),
        "runs_completed_per_s": round(len(executions) / elapsed, 1),
        "duplicate_share": round(1 - len(executions) / len(samples), 2),
        "latency_ms": {
            "p50": round(statistics.median(latencies) * 1000, 1),
            "p95": round(_percentile(latencies, 0.95) * 1000, 1),
            "p99": round(_percentile(latencies, 0.99) * 1000, 1),
            "max": round(max(latencies) * 1000, 1),
        },
        "answers": {f"{status} {outcome}": n for (status, outcome), n in statuses.items()},
    }
    print(json.dumps(report))
    if target := os.environ.get("REL_LOAD_REPORT"):
        Path(target).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
