"""Latency and throughput: through the served HTTP process, and of the ledger alone.

`stream` is one Scheduler connection sending deliveries back to back; with
`duplicate_share` > 0 that share of them repeats an earlier, completed run
(seeded, so both sides get the same sequence shape). `floor_stream` times
requests both sides refuse before touching Firestore: the server's fixed
cost, which dilutes any ledger difference end to end. `in_process_stream`
times the same first deliveries without HTTP, i.e. what the ledger itself
costs. `throughput` spreads first deliveries over C concurrent connections
and reports answers per second.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from dataclasses import dataclass

from bench.client import Connection
from bench.inprocess import InProcessSide
from bench.schedule import Headers, ScheduleTimes, delivery_headers


@dataclass(frozen=True)
class StreamSample:
    latencies_s: list[float]
    non_2xx: int


def stream(
    url: str, times: ScheduleTimes, count: int, duplicate_share: float, seed: int
) -> StreamSample:
    rng = random.Random(seed)
    sent: list[Headers] = []
    latencies: list[float] = []
    non_2xx = 0
    connection = Connection(url)
    try:
        connection.warm()
        for _ in range(count):
            if sent and rng.random() < duplicate_share:
                headers = rng.choice(sent)
            else:
                headers = delivery_headers(times.next())
                sent.append(headers)
            status, elapsed = connection.post(headers)
            latencies.append(elapsed)
            non_2xx += not 200 <= status < 300
    finally:
        connection.close()
    return StreamSample(latencies, non_2xx)


def floor_stream(url: str, count: int) -> StreamSample:
    """GETs, which both sides refuse (405 / 400) without a Firestore call."""
    latencies: list[float] = []
    connection = Connection(url)
    try:
        connection.warm()
        for _ in range(count):
            _, elapsed = connection.get()
            latencies.append(elapsed)
    finally:
        connection.close()
    return StreamSample(latencies, non_2xx=0)


def in_process_stream(side: InProcessSide, times: ScheduleTimes, count: int) -> StreamSample:
    latencies: list[float] = []
    non_2xx = 0
    for _ in range(count):
        headers = delivery_headers(times.next())
        started = time.perf_counter()
        status = side.deliver(headers)
        latencies.append(time.perf_counter() - started)
        non_2xx += not 200 <= status < 300
    return StreamSample(latencies, non_2xx)


def throughput(url: str, times: ScheduleTimes, clients: int, total: int) -> float:
    """First deliveries answered per second with `clients` connections sending at once."""
    per_client = max(1, total // clients)
    barrier = threading.Barrier(clients + 1)
    errors: list[BaseException] = []

    def client() -> None:
        connection = Connection(url)
        try:
            connection.warm()
            barrier.wait()
            for _ in range(per_client):
                status, _ = connection.post(delivery_headers(times.next()))
                if status != 200:
                    raise RuntimeError(f"first delivery answered {status}")
        except BaseException as exc:  # reported below, never silently dropped
            errors.append(exc)
            barrier.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a client failed; see errors
        barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"throughput client failed: {errors[0]!r}") from errors[0]
    return per_client * clients / elapsed
