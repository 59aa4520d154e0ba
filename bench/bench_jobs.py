"""The jobs both sides run in the benchmarks (DEDUP_JOBS_MODULE=bench.bench_jobs).

Every execution appends one line to the file named by BENCH_EXEC_LOG, outside
any ledger, so "exactly one execution" is checked by a witness that neither
side's deduplication can influence. One O_APPEND write per line keeps
concurrent executions from interleaving.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Protocol

from runledger import Jobs

EXEC_LOG_ENV = "BENCH_EXEC_LOG"
# Extra job ids, so ledger growth can be measured over several jobs.
GROWTH_JOBS = tuple(f"bench-job-{index}" for index in range(1, 5))


class RunInfo(Protocol):
    """What the jobs read; the handler's RunContext and the baseline's run both have it."""

    job_name: str
    schedule_time: datetime
    run_id: str


def exec_line(job: str, schedule_time: datetime) -> str:
    return f"{job}\t{schedule_time.isoformat()}"


def record_execution(run: RunInfo) -> None:
    path = os.environ.get(EXEC_LOG_ENV)
    if not path:
        return
    line = f"{exec_line(run.job_name, run.schedule_time)}\t{run.run_id}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def count_executions(path: Path, job: str, schedule_time: datetime) -> int:
    """How many times the run with this job and schedule time was executed."""
    if not path.exists():
        return 0
    wanted = exec_line(job, schedule_time) + "\t"
    with path.open() as log:
        return sum(1 for line in log if line.startswith(wanted))


def noop(run: RunInfo) -> None:
    """No work besides the witness line: what is left to time is the deduplication."""
    record_execution(run)


JOBS = Jobs()
JOBS.job("bench-noop")(noop)
for _job_id in GROWTH_JOBS:
    JOBS.job(_job_id)(noop)
