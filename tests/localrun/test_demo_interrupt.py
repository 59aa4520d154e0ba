"""Ctrl-C in the middle of `make demo` stops the emulator and the handler it started."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.localrun.demo_project import DEMO_ARGS

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.firestore


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# A shell's background jobs ignore SIGINT; a user's terminal does not. The demo
# restores Ctrl-C itself, after exec: a `preexec_fn` would make Popen fork (not
# vfork) this test process, whose gRPC channels to the emulator then crash the
# child before exec in grpcio's fork handlers (grpc/grpc#43055, epoll EBADF).
_WITH_CTRL_C = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'scheduler_dedup.localrun.demo'; "
    "runpy.run_module('scheduler_dedup.localrun.demo', run_name='__main__')"
)


@pytest.mark.timeout(480)
def test_ctrl_c_stops_everything_the_demo_started(firestore_emulator, tmp_path: Path) -> None:
    # (firestore_emulator only makes the test skip loudly where there is no emulator.)
    log = tmp_path / "demo.out"
    with log.open("w") as out:
        demo = subprocess.Popen(
            [sys.executable, "-c", _WITH_CTRL_C, "--runs", "40", *DEMO_ARGS],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        # The demo starts an emulator (a JVM) and the handler first: slow on a loaded machine.
        deadline = time.monotonic() + 240
        while "delivering" not in log.read_text() and time.monotonic() < deadline:
            assert demo.poll() is None, log.read_text()
            time.sleep(0.1)
        assert "delivering" in log.read_text(), log.read_text()
        started = _children(demo.pid)
        assert len(started) == 2, started  # the emulator and the handler
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=120) == 130
    finally:
        if demo.poll() is None:
            demo.kill()
    # What the demo killed is gone once the kernel has finished with it.
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in started if _alive(pid)] == []
    assert "Traceback" not in log.read_text()
    assert "interrupted" in log.read_text()
