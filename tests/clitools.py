"""Run one of the repo's command-line tools as a user does: `python -m MODULE` from the root.

The CLI tests judge the exit status and the output themselves, so a non-zero exit
is returned, never raised; each tool's tests give their own time limit, since the
tools differ widely in how long they take.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_module(module: str, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """`python -m module args` in the repo root, with stdout and stderr captured as text."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def run_ops(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The operator CLI (`python -m runledger.ops`) from handler/, with only PATH and `env` set."""
    return subprocess.run(
        [sys.executable, "-m", "runledger.ops", *args],
        cwd=REPO / "handler",
        env={"PATH": os.environ.get("PATH", ""), "PYTHONWARNINGS": "ignore", **env},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
