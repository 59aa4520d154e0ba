"""Serve the real handler over HTTP on loopback, as Cloud Run would run it.

The handler runs in its own process under functions-framework, with the
`handler/` directory as its source, so what the demo, the benchmarks and the
fault tests talk to is the code `pulumi up` deploys.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runledger.config import contract_env
from scheduler_dedup.localrun.emulator import free_port
from scheduler_dedup.localrun.process import ServiceProcess, spawn


def project_handler_dir() -> Path:
    """The handler of the project the command runs in: `make` runs from its root.

    Never this package's location: installed in a team's copy, the package is in
    the copy's virtualenv, and the handler (its `main.py` and `jobs.py`) in the copy.
    """
    return Path.cwd() / "handler"


@dataclass
class HandlerServer(ServiceProcess):
    url: str = ""


def _wait_listening(url: str, process: subprocess.Popen[bytes], deadline_s: float) -> bool:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return True
        except urllib.error.HTTPError:
            return True  # any HTTP answer (405 for GET) means it is serving
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.05)
    return False


def start_handler(
    env: Mapping[str, str],
    *,
    source: Path | None = None,
    target: str = "handle_scheduled_job",
    extra_pythonpath: tuple[Path, ...] | None = None,
    ready_timeout_s: float = 180.0,
) -> HandlerServer:
    """Start functions-framework on a free loopback port with `env` on top of ours.

    The handler's contract version is set as the program sets it, unless `env` does.

    The source's directory comes first on PYTHONPATH, as in the deployed function
    (`main` and the default `jobs` are top-level there); the default source is the
    project's `handler/main.py` (`project_handler_dir`). `extra_pythonpath`
    (default: the current directory) lets a jobs module that is not installed (a
    test's, under `tests/`) be named in DEDUP_JOBS_MODULE; the machinery comes from
    the installed (or, in the template, editable) package.
    The start-up limit is generous (a loaded machine imports slowly); a handler
    that exits while starting fails at once.
    """
    source = source or project_handler_dir() / "main.py"
    if extra_pythonpath is None:
        extra_pythonpath = (Path.cwd(),)
    port = free_port()
    pythonpath = [str(source.parent), *(str(p) for p in extra_pythonpath)]
    if existing := os.environ.get("PYTHONPATH"):
        pythonpath.append(existing)
    child_env = {**os.environ, **contract_env(), **env, "PYTHONPATH": os.pathsep.join(pythonpath)}
    child_env.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    command = [
        sys.executable,
        "-m",
        "functions_framework",
        f"--source={source}",
        f"--target={target}",
        "--host=127.0.0.1",
        f"--port={port}",
    ]
    process, log_path = spawn(command, "handler-", child_env)
    server = HandlerServer(process, log_path, url=f"http://127.0.0.1:{port}/")
    if not _wait_listening(server.url, process, ready_timeout_s):
        server.kill()
        raise RuntimeError(f"handler did not start on {server.url}:\n{server.log()[-3000:]}")
    return server
