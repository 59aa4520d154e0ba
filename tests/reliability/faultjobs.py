"""Jobs for the reliability suite, served by the real handler process.

The test names this module in DEDUP_JOBS_MODULE. Every job records what it
did in append-only files under REL_FAULT_DIR, independently of the ledger, so
a test can count executions even after the handler process was SIGKILLed.

`crash-probe` can pause at a named point (REL_PAUSE_AT) so the test can kill
the process exactly there: `claimed` (claim written, no work done yet),
`during` (half the work done), `after_work` (all work done, completion not yet
written). A pause announces itself with a `reached-<point>` file and ends when
a `release-<point>` file appears, or after REL_PAUSE_LIMIT_S seconds, so a
broken test never leaves a process waiting forever.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

from runledger import Jobs, RunContext, TerminalJobError

JOBS = Jobs()
EFFECTS = "effects.log"
BARRIER = "barrier.log"
_write_lock = threading.Lock()


def _fault_dir() -> Path:
    return Path(os.environ["REL_FAULT_DIR"])


def record(line: str, name: str = EFFECTS, durable: bool = True) -> None:
    """Append one line; fsync it (`durable`) so it survives a SIGKILL right after."""
    with _write_lock, open(_fault_dir() / name, "a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        if durable:
            os.fsync(out.fileno())


def pause_if(point: str) -> None:
    if os.environ.get("REL_PAUSE_AT") != point:
        return
    (_fault_dir() / f"reached-{point}").touch()
    release = _fault_dir() / f"release-{point}"
    deadline = time.monotonic() + float(os.environ.get("REL_PAUSE_LIMIT_S", "60"))
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@JOBS.job("crash-probe")
def crash_probe(ctx: RunContext) -> None:
    pause_if("claimed")
    record(f"begin {ctx.run_id} {ctx.attempt_id}")
    pause_if("during")
    record(f"end {ctx.run_id} {ctx.attempt_id}")
    pause_if("after_work")


LOAD_JOBS = tuple(f"load-{index}" for index in range(8))


def load_work(ctx: RunContext) -> None:
    """A short piece of work with a little jitter, like a real job's I/O wait.

    No fsync: the load test kills nothing, and an fsync per run would measure the disk.
    """
    time.sleep(random.uniform(0.002, 0.02))
    record(f"end {ctx.run_id} {ctx.attempt_id}", durable=False)


for _name in LOAD_JOBS:
    JOBS.job(_name)(load_work)


@JOBS.job("barrier")
def barrier(ctx: RunContext) -> None:
    """Run only while REL_BARRIER_N runs of this job are inside it at once.

    Each execution records its begin, then waits (bounded) until REL_BARRIER_N
    begins are recorded: a server that served requests one at a time would never
    get there, and the job fails.
    """
    record(f"begin {ctx.run_id} {ctx.attempt_id}", name=BARRIER)
    wanted = int(os.environ["REL_BARRIER_N"])
    deadline = time.monotonic() + float(os.environ.get("REL_PAUSE_LIMIT_S", "60"))
    path = _fault_dir() / BARRIER
    while len(path.read_text(encoding="utf-8").splitlines()) < wanted:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {wanted} runs of 'barrier' were in flight at once")
        time.sleep(0.02)
    record(f"end {ctx.run_id} {ctx.attempt_id}")


@JOBS.job("probe")
def probe(ctx: RunContext) -> None:
    record(f"end {ctx.run_id} {ctx.attempt_id}")


@JOBS.job("always-terminal")
def always_terminal(ctx: RunContext) -> None:
    record(f"end {ctx.run_id} {ctx.attempt_id}")
    raise TerminalJobError("the input can never be processed")
