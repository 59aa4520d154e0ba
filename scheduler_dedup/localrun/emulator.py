"""Start and stop the official Firestore emulator on a free loopback port.

Tests, the demo and the benchmarks all use the same emulator the Google Cloud
SDK ships, so that preconditions, transactions and timestamps behave as in
production. Nothing here falls back to an in-process fake: when the emulator
is missing, `EmulatorMissing` says what to install.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runledger.facts import DEFAULT_DATABASE
from scheduler_dedup.localrun.process import ServiceProcess, spawn

EMULATOR_MAIN = "com.google.cloud.datastore.emulator.firestore.CloudFirestore"
JAR_RELATIVE = Path("platform/cloud-firestore-emulator/cloud-firestore-emulator.jar")
SDK_ROOT_CANDIDATES = (Path("/usr/lib/google-cloud-sdk"), Path("/usr/share/google-cloud-sdk"))
# Starts tried when the picked port is taken before the emulator binds it.
_PORT_ATTEMPTS = 5
INSTALL_HINT = (
    "install the Google Cloud SDK component 'cloud-firestore-emulator' "
    "(Debian: google-cloud-cli-firestore-emulator; SDK: gcloud components install "
    "cloud-firestore-emulator) and java 17+"
)


class EmulatorMissing(RuntimeError):
    """An emulator (Firestore's, Pub/Sub's) or the java it needs is not installed."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sdk_roots() -> list[Path]:
    """Where a Google Cloud SDK may be: $CLOUDSDK_ROOT_DIR, gcloud's own, the usual places."""
    roots = []
    if env_root := os.environ.get("CLOUDSDK_ROOT_DIR"):
        roots.append(Path(env_root))
    if gcloud := shutil.which("gcloud"):
        roots.append(Path(os.path.realpath(gcloud)).parent.parent)
    roots.extend(SDK_ROOT_CANDIDATES)
    return roots


def find_emulator_jar() -> Path:
    """Locate the emulator jar, or raise `EmulatorMissing` with an install hint."""
    if shutil.which("java") is None:
        raise EmulatorMissing(f"java not found on PATH: {INSTALL_HINT}")
    for root in sdk_roots():
        jar = root / JAR_RELATIVE
        if jar.is_file():
            return jar
    raise EmulatorMissing(f"Firestore emulator jar not found: {INSTALL_HINT}")


@dataclass
class FirestoreEmulator(ServiceProcess):
    """One running emulator process; use as a context manager or call stop()."""

    host: str = ""
    project: str = ""

    @property
    def base_url(self) -> str:
        return f"http://{self.host}"

    def clear(self, database: str = DEFAULT_DATABASE, project: str | None = None) -> None:
        """Delete every document of one database, so each test starts from an empty ledger.

        The emulator's REST endpoint clears one project's database at a time, and
        a handler may write under another project than the emulator's own (the
        demo's handler uses the stack's): name it in `project`.
        """
        project = project or self.project
        url = f"{self.base_url}/emulator/v1/projects/{project}/databases/{database}/documents"
        request = urllib.request.Request(url, method="DELETE")
        # Generous: on 2 shared cores running several emulators a clear can stall for seconds.
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()

    def env(self) -> dict[str, str]:
        """Variables that point the Firestore client library at this emulator."""
        return {"FIRESTORE_EMULATOR_HOST": self.host, "GOOGLE_CLOUD_PROJECT": self.project}

    def as_process_env(self) -> contextlib.AbstractContextManager[None]:
        """Point this process's Firestore clients at the emulator, restoring the env after."""
        return process_env(self.env())


@contextlib.contextmanager
def process_env(values: dict[str, str]) -> Iterator[None]:
    """Set `values` in this process's environment for the block, restoring it after."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# Printed once the emulator has bound its port. A "GET /" alone could be answered
# by another emulator that already holds the port (a parallel test worker's): one
# started on a taken port keeps running for seconds before it exits with a
# BindException, so readiness is only believed from this process's own log.
_RUNNING_LINE = "Dev App Server is now running."


def _wait_ready(emulator: FirestoreEmulator, deadline_s: float) -> bool:
    return wait_ready(emulator, _RUNNING_LINE, f"{emulator.base_url}/", deadline_s)


def wait_ready(service: ServiceProcess, running_line: str, url: str, deadline_s: float) -> bool:
    """Whether `service` logged `running_line` and `url` answers `Ok` within the deadline.

    False as soon as the process exits (a taken port makes an emulator exit).
    """
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if not service.is_running():
            return False
        if running_line in service.log():
            try:
                with urllib.request.urlopen(url, timeout=1) as response:
                    if response.read().strip() == b"Ok":
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
        time.sleep(0.1)
    return False


def _warm_up(emulator: FirestoreEmulator, timeout_s: float) -> None:
    """Read one document, so the emulator's first real call is not its slow first one.

    A fresh emulator loads its Firestore engine on the first request (seconds on an
    idle machine, far more on a loaded one): longer than the ledger's 8 s call
    deadline allows. Any answer (404: no such document) means it has loaded.
    """
    url = (
        f"{emulator.base_url}/v1/projects/{emulator.project}/databases/(default)/documents/warm/up"
    )
    with contextlib.suppress(urllib.error.HTTPError):
        urllib.request.urlopen(url, timeout=timeout_s).close()


def start_emulator(
    project: str = "demo-dedup", port: int | None = None, ready_timeout_s: float = 180.0
) -> FirestoreEmulator:
    """Start an emulator on 127.0.0.1 and wait until it answers.

    The limit is generous (the JVM starts slowly on a loaded machine); an emulator
    that exits while starting fails at once.

    Without a `port`, a free one is picked; if another process takes it before
    the emulator binds it (parallel test workers start emulators at once), the
    emulator exits and a new port is tried.
    """
    jar = find_emulator_jar()
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        emulator = _spawn_emulator(jar, project, port or free_port())
        if _wait_ready(emulator, ready_timeout_s):
            _warm_up(emulator, ready_timeout_s)
            return emulator
        emulator.stop()
        if port or attempt == _PORT_ATTEMPTS or "BindException" not in emulator.log():
            break
        emulator.log_path.unlink(missing_ok=True)
    raise RuntimeError(
        f"Firestore emulator did not become ready on {emulator.host} "
        f"(log kept: {emulator.log_path}):\n{emulator.log()[-2000:]}"
    )


def _spawn_emulator(jar: Path, project: str, port: int) -> FirestoreEmulator:
    process, log_path = spawn(
        ["java", "-cp", str(jar), EMULATOR_MAIN, "start", "--host=127.0.0.1", f"--port={port}"],
        "firestore-emulator-",
    )
    return FirestoreEmulator(process, log_path, host=f"127.0.0.1:{port}", project=project)
