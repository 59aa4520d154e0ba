"""Helpers shared by the reliability suite: raw HTTP deliveries, effect counts,
structured log parsing, bounded waits and a store wrapper that injects faults.

Everything talks to 127.0.0.1 only and every wait is bounded in time.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from google.cloud import firestore

from runledger.delivery.identify import (
    parse_schedule_time,
    run_key,
    schedule_time_text,
    scheduler_headers,
)
from runledger.exceptions import StoreUnavailable
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.ledger.record import RunRecord, Versioned
from runledger.ledger.store import RunStore
from scheduler_dedup.localrun.emulator import FirestoreEmulator
from scheduler_dedup.localrun.handler_server import HandlerServer, start_handler

JOBS_MODULE = "tests.reliability.faultjobs"
PROJECT = "acme-prod"
REGION = "europe-west1"

HeaderValue = str | bytes


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    raw: bytes

    @property
    def outcome(self) -> str | None:
        return self.body.get("outcome")


def deliver(
    url: str,
    headers: Iterable[tuple[str, HeaderValue]],
    *,
    body: bytes = b"",
    method: str = "POST",
    timeout_s: float = 40.0,
) -> Reply:
    """Send one request exactly as given: repeated, empty or non-UTF-8 headers included."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    try:
        conn.putrequest(method, parts.path or "/", skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        parsed = {}
    return Reply(response.status, parsed if isinstance(parsed, dict) else {}, raw)


def schedule_time_now(offset_s: int = 0) -> str:
    """A schedule time inside the retention window and not in the future (not a forced run)."""
    moment = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5 - offset_s)
    return schedule_time_text(moment)


def run_headers(
    job: str, schedule_time: str, project: str = PROJECT, region: str = REGION
) -> list[tuple[str, HeaderValue]]:
    return list(scheduler_headers(job, schedule_time, project, region))


def probe_key(job: str, schedule_time: str) -> str:
    """The run key the server derives from `run_headers(job, schedule_time)` (not forced)."""
    return run_key(job, parse_schedule_time(schedule_time), PROJECT, REGION, False)


class ProbeRun(NamedTuple):
    """One run as a test drives it through a real server and then reads it back directly."""

    headers: list[tuple[str, HeaderValue]]
    key: str
    store: FirestoreRunStore


def probe_run(emulator: FirestoreEmulator, collection: str, job: str = "crash-probe") -> ProbeRun:
    """A run scheduled now: the headers to deliver it, its key, and the server's ledger.

    The store reads `collection` on `emulator` directly, never through a link the
    test may cut, so the test sees what the server really wrote.
    """
    when = schedule_time_now()
    store = FirestoreRunStore(firestore.Client(project=emulator.project), collection)
    return ProbeRun(run_headers(job, when), probe_key(job, when), store)


def count_docs(emulator: FirestoreEmulator, collection: str) -> int:
    """How many ledger documents `collection` holds: a refused delivery must add none."""
    client = firestore.Client(project=emulator.project)
    return sum(1 for _ in client.collection(collection).stream())


def server_env(
    emulator: FirestoreEmulator | Mapping[str, str],
    fault_dir: Path,
    collection: str,
    *,
    lease_s: int = 2,
    **extra: str,
) -> dict[str, str]:
    """Handler settings for the real server: short lease, our jobs module, our fault dir."""
    base = emulator.env() if isinstance(emulator, FirestoreEmulator) else dict(emulator)
    return {
        **base,
        "DEDUP_JOBS_MODULE": JOBS_MODULE,
        "DEDUP_LEASE_SECONDS": str(lease_s),
        "DEDUP_RETENTION_SECONDS": "3600",
        "DEDUP_COLLECTION": collection,
        "REL_FAULT_DIR": str(fault_dir),
        "REL_PAUSE_LIMIT_S": "60",
        **extra,
    }


def effects(fault_dir: Path, name: str = "effects.log") -> list[tuple[str, str, str]]:
    """(kind, run_id, attempt_id) per line the jobs appended; survives SIGKILL."""
    path = fault_dir / name
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        kind, run_id, attempt_id = line.split()
        rows.append((kind, run_id, attempt_id))
    return rows


def completed_work(fault_dir: Path) -> list[tuple[str, str]]:
    return [(run, attempt) for kind, run, attempt in effects(fault_dir) if kind == "end"]


def wait_for(
    condition: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.02
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def log_entries(text: str) -> list[dict[str, Any]]:
    """The handler's structured JSON lines; anything else (framework noise) is skipped."""
    entries = []
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "severity" in entry:
            entries.append(entry)
    return entries


class Crash(BaseException):
    """Raised to model the process dying: nothing in the handler catches BaseException."""


@dataclass
class Fault:
    """Inject one fault at the `nth` call (1-based, counted from arming) of `op`.

    kind: `unavailable` (the call fails and does not apply), `lost_answer` (the
    call applies, then its answer is lost), `crash_before` / `crash_after` (the
    process dies before / after the call applies), `hook` (run `hook` first).
    """

    op: str
    nth: int
    kind: str
    hook: Callable[[], None] | None = None


@dataclass
class FaultyStore:
    """A RunStore wrapper that injects armed faults into its primitives: get, create, update."""

    inner: RunStore
    faults: list[Fault] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)
    fired: list[Fault] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def arm(self, *faults: Fault) -> None:
        with self._lock:
            self.faults = list(faults)
            self.calls = {}
            self.fired = []

    def _call(self, op: str, action: Callable[[], Any]) -> Any:
        with self._lock:
            self.calls[op] = self.calls.get(op, 0) + 1
            fault = next((f for f in self.faults if f.op == op and f.nth == self.calls[op]), None)
            if fault is not None:
                self.fired.append(fault)
        if fault is None:
            return action()
        if fault.kind == "hook":
            assert fault.hook is not None
            fault.hook()
            return action()
        if fault.kind == "unavailable":
            raise StoreUnavailable(f"injected: {op} #{fault.nth} unreachable")
        if fault.kind == "crash_before":
            raise Crash(f"injected crash before {op} #{fault.nth}")
        action()
        if fault.kind == "lost_answer":
            raise StoreUnavailable(f"injected: answer to {op} #{fault.nth} lost")
        raise Crash(f"injected crash after {op} #{fault.nth}")

    def get(self, key: str) -> Versioned | None:
        return self._call("get", lambda: self.inner.get(key))

    def get_many(self, keys: Sequence[str]) -> dict[str, RunRecord]:
        return self._call("get_many", lambda: self.inner.get_many(keys))

    def create(self, key: str, record: RunRecord) -> Any:
        return self._call("create", lambda: self.inner.create(key, record))

    def update(self, key: str, changes: Mapping[str, Any], version: Any) -> Any:
        return self._call("update", lambda: self.inner.update(key, changes, version))


class Servers:
    """Starts handler processes for one test and kills every one of them afterwards."""

    def __init__(self) -> None:
        self.started: list[HandlerServer] = []

    def start(self, env: Mapping[str, str]) -> HandlerServer:
        server = start_handler(env)
        self.started.append(server)
        return server

    def reap(self) -> None:
        for server in self.started:
            server.kill()
