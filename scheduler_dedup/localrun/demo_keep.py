"""`make demo ARGS=--keep` and `make demo-stop`: the demo's emulator and handler, left running.

After a kept demo the ledger it wrote stays in the emulator and the handler
keeps serving, so the operator CLI (`make ops`) and hand-sent deliveries work
on it. What was left running is written to demo-keep.json (process groups, the
demo's work directory and logs) and the variables the handler runs with to
demo.env, both in .localrun/ ($DEMO_KEEP_DIR when set), so `. .localrun/demo.env`
gives a shell the same settings. The stop
command ends both process groups and removes all of it; a second kept demo
refuses to start while one is still running.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

from runledger.facts import JOB_HEADER, SCHEDULE_HEADER

STATE_DIR_ENV = "DEMO_KEEP_DIR"
STOP_COMMAND = "make demo-stop"
# SIGTERM first; what is still alive after this long gets SIGKILL.
STOP_GRACE_S = 10.0
# The variables `make ops` and the handler read; the demo's own files are not among them.
_EXPORTED_PREFIXES = ("DEDUP_",)
_EXPORTED = ("FIRESTORE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT")


@dataclass(frozen=True)
class KeptProcess:
    name: str
    # The service's process group (scheduler_dedup.localrun.process starts each in its own session).
    pgid: int
    log_path: str


@dataclass(frozen=True)
class KeptDemo:
    processes: tuple[KeptProcess, ...]
    workdir: str
    handler_url: str


class KeepError(Exception):
    """A kept demo cannot be started or stopped; the message is one line for the user."""


def _state_dir() -> Path:
    """DEMO_KEEP_DIR, else the project's `.localrun` (make runs from the project's root)."""
    return Path(os.environ.get(STATE_DIR_ENV) or Path.cwd() / ".localrun")


def state_path() -> Path:
    return _state_dir() / "demo-keep.json"


def env_path() -> Path:
    """The exports of a kept demo, for `. .localrun/demo.env` in a shell."""
    return _state_dir() / "demo.env"


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state() -> KeptDemo | None:
    try:
        data = json.loads(state_path().read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise KeepError(f"{state_path()}: unreadable ({exc}); remove it") from None
    return KeptDemo(
        tuple(KeptProcess(**p) for p in data["processes"]), data["workdir"], data["handler_url"]
    )


def refuse_if_running() -> None:
    """A kept demo still running holds the state file: say so before starting another."""
    state = read_state()
    if state is not None and any(_alive(p.pgid) for p in state.processes):
        raise KeepError(f"a kept demo is still running on {state.handler_url}: {STOP_COMMAND}")


def exports(env: Mapping[str, str]) -> dict[str, str]:
    """The handler's settings a shell needs for `make ops` against the kept ledger."""
    return {
        name: value
        for name, value in sorted(env.items())
        if name in _EXPORTED or name.startswith(_EXPORTED_PREFIXES)
    }


def save(state: KeptDemo, env: Mapping[str, str]) -> None:
    _state_dir().mkdir(parents=True, exist_ok=True)
    state_path().write_text(json.dumps(asdict(state), indent=1) + "\n", encoding="utf-8")
    lines = [f"export {name}={shlex.quote(value)}" for name, value in exports(env).items()]
    env_path().write_text("\n".join(lines) + "\n", encoding="utf-8")


def curl_command(
    url: str, job: str, schedule_time: str, headers: Sequence[tuple[str, str]], body: bytes
) -> str:
    """One delivery as Cloud Scheduler sends it, for a terminal."""
    parts = ["curl", "-i", "-X", "POST", url, "-H", f"{JOB_HEADER}: {job}"]
    parts += ["-H", f"{SCHEDULE_HEADER}: {schedule_time}"]
    for name, value in headers:
        parts += ["-H", f"{name}: {value}"]
    if body:
        parts += ["--data-raw", body.decode()]
    return " ".join(shlex.quote(part) for part in parts)


def kept_message(env: Mapping[str, str], curl: str | None) -> str:
    """What a kept demo prints: the exports, the commands that work now, how to stop.

    `curl` delivers a run that completed again; None when no run completed.
    """
    lines = ["kept running: the Firestore emulator and the handler. In a shell:"]
    lines += [f"  export {name}={shlex.quote(value)}" for name, value in exports(env).items()]
    lines += [
        f"  (or: . {_shown(env_path())})",
        "then:",
        '  make ops ARGS="list"          the runs the demo left in the ledger',
        '  make ops ARGS="audit"         the audit over the same ledger',
    ]
    if curl is None:
        lines.append("  (no run completed, so there is no delivered run to send again)")
    else:
        lines += [
            f"  {curl}",
            "                                a run that completed, delivered again: 200, "
            f"nothing runs twice (leave out {SCHEDULE_HEADER} for a forced run)",
        ]
    lines.append(f"stop both with: {STOP_COMMAND}")
    return "\n".join(lines)


def _shown(path: Path) -> str:
    here = Path.cwd()
    return str(path.relative_to(here)) if path.is_relative_to(here) else str(path)


def stop(out: TextIO = sys.stdout) -> int:
    """End every process group a kept demo left running and remove its files."""
    state = read_state()
    if state is None:
        print("no kept demo is running", file=out)
        return 0
    for process in state.processes:
        if _alive(process.pgid):
            os.killpg(process.pgid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while any(_alive(p.pgid) for p in state.processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    for process in state.processes:
        if _alive(process.pgid):
            os.killpg(process.pgid, signal.SIGKILL)
    left = [p.name for p in state.processes if _wait_gone(p.pgid)]
    if left:
        print(f"error: still running after SIGKILL: {', '.join(left)}", file=sys.stderr)
        return 1
    shutil.rmtree(state.workdir, ignore_errors=True)
    for process in state.processes:
        Path(process.log_path).unlink(missing_ok=True)
    state_path().unlink(missing_ok=True)
    env_path().unlink(missing_ok=True)
    names = " and ".join(p.name for p in state.processes)
    print(f"stopped the kept demo's {names}", file=out)
    return 0


def _wait_gone(pgid: int, timeout_s: float = 5.0) -> bool:
    """True if the group is still alive after `timeout_s` (a SIGKILL takes a moment)."""
    deadline = time.monotonic() + timeout_s
    while _alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _alive(pgid)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["stop"]:
        print("usage: python -m scheduler_dedup.localrun.demo_keep stop", file=sys.stderr)
        return 2
    try:
        return stop()
    except KeepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
