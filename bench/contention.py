"""N identical deliveries of one run at the same instant: time until all are answered.

This is the storm a lost acknowledgement or a proxy retry produces. Every
client thread opens and warms its own connection, all wait on a barrier,
then post the same run at once. The wall time runs from the first send to
the last answer; the execution witness (`bench.bench_jobs`) must show the
job ran exactly once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.bench_jobs import count_executions
from bench.client import Connection
from bench.schedule import JOB, ScheduleTimes, delivery_headers


@dataclass(frozen=True)
class ContentionSample:
    wall_s: float
    executions: int
    statuses: dict[int, int]


def storm(url: str, exec_log: Path, n: int, times: ScheduleTimes) -> ContentionSample:
    schedule_time = times.next()
    headers = delivery_headers(schedule_time)
    barrier = threading.Barrier(n)
    starts: list[float] = [0.0] * n
    ends: list[float] = [0.0] * n
    statuses: list[int] = [0] * n
    errors: list[BaseException] = []

    def client(index: int) -> None:
        connection = Connection(url)
        try:
            connection.warm()
            barrier.wait()
            starts[index] = time.perf_counter()
            statuses[index], _ = connection.post(headers)
            ends[index] = time.perf_counter()
        except BaseException as exc:  # reported below, never silently dropped
            errors.append(exc)
            barrier.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"contention client failed at N={n}: {errors[0]!r}") from errors[0]
    return ContentionSample(
        wall_s=max(ends) - min(starts),
        executions=count_executions(exec_log, JOB, schedule_time),
        statuses=dict(Counter(statuses)),
    )
