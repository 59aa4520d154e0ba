"""What the numbers were measured on, printed with every table: they mean nothing without it."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _emulator_version() -> str:
    try:
        done = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", "google-cloud-cli-firestore-emulator"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() or "unknown"


def _package(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "missing"


def describe() -> dict[str, str]:
    return {
        "cpus": str(os.cpu_count()),
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "firestore_emulator": f"google-cloud-cli-firestore-emulator {_emulator_version()}",
        "google-cloud-firestore": _package("google-cloud-firestore"),
        "functions-framework": _package("functions-framework"),
    }
