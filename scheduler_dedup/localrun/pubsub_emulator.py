"""Start and stop the official Pub/Sub emulator on a free loopback port.

The dead-letter tests publish to the emulator the Google Cloud SDK ships
(`platform/pubsub-emulator`, Debian package google-cloud-cli-pubsub-emulator),
found as the Firestore emulator is (`emulator.sdk_roots`). Clients reach it
through PUBSUB_EMULATOR_HOST. Nothing falls back to a fake: when it is missing,
`EmulatorMissing` says what to install.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from scheduler_dedup.localrun.emulator import (
    EmulatorMissing,
    free_port,
    process_env,
    sdk_roots,
    wait_ready,
)
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

    def as_process_env(self) -> contextlib.AbstractContextManager[None]:
        """Point this process's Pub/Sub clients at the emulator, restoring the env after."""
        return process_env(self.env())


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
        if wait_ready(emulator, _RUNNING_LINE, f"http://{emulator.host}/", ready_timeout_s):
            return emulator
        emulator.stop()
        if attempt == _PORT_ATTEMPTS or "BindException" not in emulator.log():
            break
        emulator.log_path.unlink(missing_ok=True)
    raise RuntimeError(
        f"Pub/Sub emulator did not become ready on {emulator.host} "
        f"(log kept: {emulator.log_path}):\n{emulator.log()[-2000:]}"
    )
