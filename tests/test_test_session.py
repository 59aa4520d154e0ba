"""The test session's own guarantees hold serially and on pytest-xdist workers alike.

`make test` runs the suite on several workers, each with its own emulator. A
missing emulator must still print the banner naming the tests not run and fail
the session, and the services' logs must still be kept after a failure (all
workers' in one directory) and removed after a clean run. Each case runs a tiny
suite in a fresh pytest process with this repository's session conftest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")
MODES = {"serial": ["-p", "no:xdist"], "xdist": ["-n", "2"]}

NEEDS_FIRESTORE = """
def test_uses_the_emulator(firestore_db):
    firestore_db.collection("probe").document("d").set({"ok": True})


def test_plain():
    assert True
"""


def _run_suite(tmp_path: Path, tests: str, mode: str, **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "test_probe.py").write_text(tests, encoding="utf-8")
    temp = tmp_path / "tmp"
    temp.mkdir()
    child_env = {**os.environ, "TMPDIR": str(temp), **env}
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID", "LOCALRUN_LOG_DIR"):
        child_env.pop(name, None)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *MODES[mode]]
    return subprocess.run(
        [*command, "-rs", "test_probe.py"],
        cwd=tmp_path,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _log_dirs(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "tmp").glob("dedup-test-logs-*"))


@pytest.mark.parametrize("mode", MODES)
def test_missing_emulator_prints_the_banner_and_fails_the_session(tmp_path, mode):
    no_java = tmp_path / "bin"
    no_java.mkdir()
    result = _run_suite(tmp_path, NEEDS_FIRESTORE, mode, PATH=str(no_java))
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    assert "FIRESTORE EMULATOR MISSING: 1 tests NOT RUN" in result.stdout
    assert "not run: test_probe.py::test_uses_the_emulator" in result.stdout
    assert "1 passed, 1 skipped" in result.stdout
    assert _log_dirs(tmp_path) == []


@pytest.mark.firestore
@pytest.mark.parametrize("mode", MODES)
def test_service_logs_are_removed_after_a_clean_run(tmp_path, mode):
    result = _run_suite(tmp_path, NEEDS_FIRESTORE, mode)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "2 passed" in result.stdout
    assert "EMULATOR MISSING" not in result.stdout
    assert _log_dirs(tmp_path) == []


@pytest.mark.firestore
def test_every_workers_service_logs_are_kept_in_one_directory_after_a_failure(tmp_path):
    failing = "\n".join(
        f"def test_fails_{index}(firestore_db):\n    assert False\n" for index in range(4)
    )
    result = _run_suite(tmp_path, failing, "xdist")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    kept = _log_dirs(tmp_path)
    assert len(kept) == 1, result.stdout[-3000:]
    assert f"emulator and handler logs kept in {kept[0]}" in result.stdout
    # xdist hands the first four tests out round-robin: each worker started its own emulator.
    emulator_logs = list(kept[0].glob("firestore-emulator-*.log"))
    assert len(emulator_logs) == 2
    assert all("Dev App Server is now running" in log.read_text() for log in emulator_logs)
