"""A local service in its own process group, with its output in a log file.

The emulator and the handler server are both started this way, so a stop or
a simulated crash (SIGKILL) reaches every process they spawned.

Logs go to $LOCALRUN_LOG_DIR when it is set, else to the system temp
directory; whoever starts a service removes its log or says where it is (the
test session keeps all of them in one directory, removed after a clean run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LOG_DIR_ENV = "LOCALRUN_LOG_DIR"


@dataclass
class ServiceProcess:
    process: subprocess.Popen[bytes] = field(repr=False)
    log_path: Path = field(repr=False)

    def is_running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM the process group, then SIGKILL it if it has not gone in 10 s."""
        if self.is_running():
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL the whole process group: a crash, with no chance to clean up."""
        if self.is_running():
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def spawn(
    command: Sequence[str], log_prefix: str, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start `command` in a new session, stdout and stderr to a fresh log file."""
    log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - outlives this function
        prefix=log_prefix, suffix=".log", dir=os.environ.get(LOG_DIR_ENV) or None, delete=False
    )
    with log_file:
        process = subprocess.Popen(
            list(command),
            env=None if env is None else dict(env),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return process, Path(log_file.name)
