"""Shared fixtures: one official Firestore emulator for the whole session.

Tests that need Firestore take the `firestore_db` fixture (an empty database,
a client pointed at the emulator). If the emulator is not installed they are
skipped with a loud reason, the session ends with a banner naming them, and
the exit status is non-zero: a missing emulator never looks like a clean pass.

`make test` runs the suite on several pytest-xdist workers. Each worker is its
own process, so the session fixture gives each its own emulator on its own
port; the controller process collects every worker's reports, so the banner
and the exit status above come out once, from it, as in a serial run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# gRPC's C core logs transport events at INFO to stderr ("Got goaway" when a test
# stops an emulator under an open channel): noise in the suite's output, and in
# the output of every handler and tool a test starts, which inherit this. Errors
# still print. Set before any test module loads grpc, which reads it once.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from scheduler_dedup.localrun.emulator import EmulatorMissing, FirestoreEmulator, start_emulator
from scheduler_dedup.localrun.process import LOG_DIR_ENV
from scheduler_dedup.localrun.pubsub_emulator import PubSubEmulator, start_pubsub_emulator

MISSING_PREFIX = "FIRESTORE EMULATOR MISSING"
# The dead-letter tests' (fixture `pubsub_emulator`): counted, listed and failed alike.
PUBSUB_MISSING_PREFIX = "PUBSUB EMULATOR MISSING"
_missing_tests: list[str] = []
# Every emulator and handler log of the session goes here: removed after a
# clean run, named in the summary otherwise. Workers start with the
# controller's environment, so they write into the controller's directory and
# only the controller, which sees the session's outcome, removes it.
_CONTROLLER_LOGS = bool(os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(LOG_DIR_ENV))
if _CONTROLLER_LOGS:
    _SERVICE_LOGS = Path(os.environ[LOG_DIR_ENV])
else:
    _SERVICE_LOGS = Path(tempfile.mkdtemp(prefix="dedup-test-logs-"))
    os.environ[LOG_DIR_ENV] = str(_SERVICE_LOGS)


@pytest.fixture(scope="session")
def firestore_emulator() -> Iterator[FirestoreEmulator]:
    try:
        emulator = start_emulator()
    except EmulatorMissing as exc:
        pytest.skip(f"{MISSING_PREFIX}: {exc}")
    with emulator, emulator.as_process_env():
        yield emulator


@pytest.fixture(scope="session")
def pubsub_emulator() -> Iterator[PubSubEmulator]:
    """The official Pub/Sub emulator, started once per worker; clients reach it by env."""
    try:
        emulator = start_pubsub_emulator()
    except EmulatorMissing as exc:
        pytest.skip(f"{PUBSUB_MISSING_PREFIX}: {exc}")
    with emulator, emulator.as_process_env():
        yield emulator


@pytest.fixture
def firestore_db(firestore_emulator: FirestoreEmulator):
    """A Firestore client on an emptied emulator database."""
    from google.cloud import firestore

    firestore_emulator.clear()
    return firestore.Client(project=firestore_emulator.project)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that declare a timeout run first, the longest first; the rest in collected order.

    On parallel workers the session lasts at least as long as its longest test
    plus whatever ran before it on that worker: a test its author knows to be
    long (it says so with `@pytest.mark.timeout(...)`) must not start last.
    """

    def declared(item: pytest.Item) -> float:
        marker = item.get_closest_marker("timeout")
        return float(marker.args[0]) if marker and marker.args else 0.0

    items.sort(key=declared, reverse=True)


# Modules whose tests share a costly module fixture (tests/test_wheel.py: a wheel and a
# fresh virtualenv): their tests run on one worker, so the fixture is built once.
# pytest-xdist's `xdist_group` mark cannot say it: pytest 9 ignores the node-id
# suffix pytest-xdist 3.8 gives a grouped test, so the scheduler below groups them.
ONE_WORKER_MODULES = ("tests/test_wheel.py",)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` (`make test`): a test at a time per worker, ONE_WORKER_MODULES whole."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class Scheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER_MODULES else super()._split_scope(nodeid)

    return Scheduling(config, log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
    missing = MISSING_PREFIX in reason or PUBSUB_MISSING_PREFIX in reason
    if report.skipped and missing:
        _missing_tests.append(report.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if _SERVICE_LOGS.exists():
        terminalreporter.write_line(f"emulator and handler logs kept in {_SERVICE_LOGS}")
    if _missing_tests:
        terminalreporter.write_sep("!", f"{MISSING_PREFIX}: {len(_missing_tests)} tests NOT RUN")
        for nodeid in _missing_tests:
            terminalreporter.write_line(f"not run: {nodeid}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _missing_tests and session.exitstatus == 0:
        session.exitstatus = 1
    if _CONTROLLER_LOGS:
        return
    # The session's services are stopped by now; their logs only matter after a failure.
    if session.exitstatus == 0 or not any(_SERVICE_LOGS.iterdir()):
        shutil.rmtree(_SERVICE_LOGS, ignore_errors=True)
