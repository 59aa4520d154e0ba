"""Start and stop the official Pub/Sub emulator on a free loopback port.

The dead-letter tests publish to the emulator the Google Cloud SDK ships
(`platform/pubsub-emulator`, Debian package google-cloud-cli-pubsub-emulator),
found as the Firestore emulator is (`emulator.sdk_roots`). Clients reach it
through PUBSUB_EMULATOR_HOST. Nothing falls back to a fake: when it is missing,
`EmulatorMissing` says what to install.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from scheduler_dedup.localrun.emulator import EmulatorMissing, free_port, sdk_roots
from scheduler_dedup.localrun.process import ServiceProcess, spawn

LIB_RELATIVE = Path("platform/pubsub-emulator/lib")
INSTALL_HINT = (
    "install the Google Cloud SDK component 'pubsub-emulator' (Debian: "
    "google-cloud-cli-pubsub-emulator; SDK: gcloud components install pubsub-emulator) "
    "and java 17+"
)
# Printed once the emulator has bound its port (a "GET /" alone could be another's).
_RUNNING_LINE = "Server started, listening on"
_PORT_ATTEMPTS = 5


def find_pubsub_jar() -> Path:
    """The emulator's jar, or `EmulatorMissing` with an install hint."""
    if shutil.which("java") is None:
        raise EmulatorMissing(f"java not found on PATH: {INSTALL_HINT}")
    for root in sdk_roots():
        jars = sorted((root / LIB_RELATIVE).glob("cloud-pubsub-emulator-*.jar"))
        if jars:
            return jars[-1]
    raise EmulatorMissing(f"Pub/Sub emulator jar not found: {INSTALL_HINT}")


@dataclass
class PubSubEmulator(ServiceProcess):
    host: str = ""
    project: str = ""

    def env(self) -> dict[str, str]:
        """What points Google's Pub/Sub clients at this emulator."""
        return {"PUBSUB_EMULATOR_HOST": self.host, "PUBSUB_PROJECT_ID": self.project}

    @contextlib.contextmanager
    def as_process_env(self) -> Iterator[None]:
        """Point this process's Pub/Sub clients at the emulator, restoring the env after."""
        saved = {key: os.environ.get(key) for key in self.env()}
        os.environ.update(self.env())
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _ready(emulator: PubSubEmulator, deadline_s: float) -> bool:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if not emulator.is_running():
            return False
        if _RUNNING_LINE in emulator.log():
            try:
                with urllib.request.urlopen(f"http://{emulator.host}/", timeout=1) as response:
                    if response.read().strip() == b"Ok":
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
        time.sleep(0.1)
    return False


def start_pubsub_emulator(
    project: str = "demo-dedup", ready_timeout_s: float = 180.0
) -> PubSubEmulator:
    """Start an emulator on 127.0.0.1 and wait until it answers (generously: a loaded JVM).

    A port another process takes before the emulator binds it makes the emulator
    exit: a new port is tried.
    """
    jar = find_pubsub_jar()
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        port = free_port()
        process, log_path = spawn(
            ["java", "-jar", str(jar), "--host=127.0.0.1", f"--port={port}"], "pubsub-emulator-"
        )
        emulator = PubSubEmulator(process, log_path, host=f"127.0.0.1:{port}", project=project)
        if _ready(emulator, ready_timeout_s):
            return emulator
        emulator.stop()
        if attempt == _PORT_ATTEMPTS or "BindException" not in emulator.log():
            break
        emulator.log_path.unlink(missing_ok=True)
    raise RuntimeError(
        f"Pub/Sub emulator did not become ready on {emulator.host} "
        f"(log kept: {emulator.log_path}):\n{emulator.log()[-2000:]}"
    )
