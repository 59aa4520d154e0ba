"""One benchmark run: one emulator, both sides served side by side, interleaved repetitions.

Every repetition measures each metric on both sides back to back, and the
side that goes first alternates from one repetition to the next, so drift in
the machine's load (2 shared cores) falls on both sides alike and each
repetition yields a paired handler/baseline ratio. Raw samples are returned;
`bench.report` turns them into the table.

With `rtt_ms` > 0 a second pair of served processes reaches the same emulator
through one `bench.latency_link.LatencyLink` each, so their latency streams
pay a modelled network round trip per RPC, as against production Firestore;
the loopback streams are measured as before, in the same repetitions.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from google.cloud import firestore

from bench import REPO_ROOT, dupwait, overlap, simulation
from bench.audit_cost import AuditSize, measure_audit
from bench.audit_steady import SteadySize, measure_steady
from bench.bench_jobs import EXEC_LOG_ENV, GROWTH_JOBS
from bench.coldstart import probe
from bench.contention import storm
from bench.inprocess import InProcessSide, make_side
from bench.latency import floor_stream, in_process_stream, stream, throughput
from bench.latency_link import LatencyLink, measure_link_rtt
from bench.ledger_size import measure_growth
from bench.machine import describe
from bench.opcount import OpCounter
from bench.rpcs import SCENARIOS, measure
from bench.schedule import ScheduleTimes
from bench.summary import percentile
from runledger.config import (
    COLLECTION_ENV,
    DUPLICATE_WAIT_ENV,
    JOBS_MODULE_ENV,
    LEASE_ENV,
    RETENTION_ENV,
    contract_env,
)
from scheduler_dedup.localrun.emulator import FirestoreEmulator, start_emulator
from scheduler_dedup.localrun.handler_server import HandlerServer, start_handler
from scheduler_dedup.localrun.rpccount import RpcCounter

SIDES = ("handler", "baseline")
ENTRY_POINTS = {
    "handler": (REPO_ROOT / "handler" / "main.py", "handle_scheduled_job"),
    "baseline": (REPO_ROOT / "bench" / "baseline_main.py", "handle_baseline"),
}
# The guide's sample values: a 5-minute lease and a 1-day retention.
LEASE_SECONDS = 300
RETENTION_SECONDS = 86400
# gunicorn threads per served process: enough for the largest storm to be
# answered concurrently rather than queued behind the default 4 x cores.
SERVER_THREADS = 32
FIRST_STREAM = "first deliveries"
DUP_STREAM = "30% duplicates"
IN_PROCESS = "first deliveries, in-process (no HTTP)"
FLOOR = "refused GET, no Firestore call (server floor)"
# Deliveries per warm-up chunk; chunks alternate between the sides.
WARMUP_CHUNK = 50


def rtt_variant(stream_name: str, rtt_ms: float) -> str:
    """The latency row name of a stream measured through the modelled round trip."""
    return f"{stream_name}, RTT {rtt_ms:g} ms"


@dataclass(frozen=True)
class BenchConfig:
    reps: int = 5
    contention_sizes: tuple[int, ...] = (2, 8, 32)
    stream_requests: int = 200
    duplicate_share: float = 0.3
    throughput_clients: tuple[int, ...] = (4, 16)
    throughput_requests: int = 320
    in_process_requests: int = 100
    floor_requests: int = 100
    coldstart_reps: int = 5
    # Fresh processes are the noisiest sample on 2 shared cores: 4 pairs per
    # repetition (20 in all) before a median means anything.
    coldstart_per_rep: int = 4
    # The emulator is a JVM: its RPCs get about twice as fast over the first
    # ~1000 deliveries. Both sides are warmed (through HTTP and in-process)
    # before anything is timed, so the tables show the steady state.
    warmup_deliveries: int = 600
    growth: tuple[tuple[int, int], ...] = ((1, 10), (4, 10), (4, 40))
    # Modelled network round trip between each served process and Firestore,
    # for a second run of the latency streams; 0 leaves them out. 2 ms is a
    # conservative same-region figure (Cloud Run to Firestore in one region
    # is typically a few ms per RPC), so the modelled gap is if anything small.
    rtt_ms: float = 2.0
    # The RTT servers are fresh processes: their first deliveries import the
    # Firestore client and open its channel, so they get their own warm-up.
    rtt_warmup_deliveries: int = 100
    # Echo round trips per repetition that calibrate a link (relay overhead included).
    link_echo_count: int = 100
    # One full-window audit's cost (`ops audit --since`: jobs, every N minutes, look-back
    # hours), each timed `reps` times. 300 jobs over 6 h (21,600 reads) is over
    # runledger.audit.expected.MAX_READS and refused; over 5 h (18,000) it fits.
    audit_sizes: tuple[AuditSize, ...] = (
        AuditSize(10, 5, 6),
        AuditSize(100, 5, 6),
        AuditSize(300, 5, 6),
        AuditSize(300, 5, 5),
    )
    # The handler's audit from its watermarks, once each (an audit moves them on):
    # steady state, and the first audit after a 6-hour audit outage.
    steady_sizes: tuple[SteadySize, ...] = (
        SteadySize(1000, 5),
        SteadySize(5000, 5),
        SteadySize(5000, 5, timedelta(hours=6)),
    )
    # Seeds of the deterministic simulation timed once (bench.simulation).
    simulation_seeds: int = 20

    @classmethod
    def quick(cls, reps: int = 2) -> BenchConfig:
        """Small enough for a smoke test: every metric, a fraction of the samples."""
        return cls(
            reps=reps,
            contention_sizes=(2, 8),
            stream_requests=30,
            throughput_clients=(4,),
            throughput_requests=40,
            in_process_requests=20,
            floor_requests=20,
            coldstart_reps=1,
            coldstart_per_rep=1,
            warmup_deliveries=50,
            growth=((1, 3), (2, 3)),
            rtt_warmup_deliveries=20,
            audit_sizes=(AuditSize(10, 5, 6), AuditSize(100, 5, 1), AuditSize(300, 5, 6)),
            steady_sizes=(SteadySize(1000, 5), SteadySize(1000, 5, timedelta(hours=6))),
            simulation_seeds=2,
        )


@dataclass
class Samples:
    """Raw measurements, keyed metric -> variant -> side -> one entry per repetition."""

    config: dict[str, Any]
    machine: dict[str, str]
    order: list[list[str]] = field(default_factory=list)
    data: dict[str, dict[str, dict[str, list[Any]]]] = field(default_factory=dict)

    def add(self, metric: str, variant: str, side: str, value: Any) -> None:
        by_side = self.data.setdefault(metric, {}).setdefault(variant, {})
        by_side.setdefault(side, []).append(value)


def side_order(rep: int) -> tuple[str, ...]:
    return SIDES if rep % 2 == 0 else tuple(reversed(SIDES))


def side_env(emulator: FirestoreEmulator, side: str, workdir: Path) -> dict[str, str]:
    return {
        **emulator.env(),
        COLLECTION_ENV: f"bench_{side}_runs",
        LEASE_ENV: str(LEASE_SECONDS),
        RETENTION_ENV: str(RETENTION_SECONDS),
        JOBS_MODULE_ENV: "bench.bench_jobs",
        "THREADS": str(SERVER_THREADS),
        EXEC_LOG_ENV: str(workdir / f"{side}-executions.log"),
        # Off in the served handler, so a storm's copies are answered at once as the
        # baseline's are; `bench.dupwait` measures the wait on its own.
        DUPLICATE_WAIT_ENV: "0",
        # As the program deploys the handler (the cold-start probe imports it with this env).
        **contract_env(),
    }


def _warm_up(
    count: int,
    servers: dict[str, HandlerServer],
    in_process: dict[str, InProcessSide],
    times: ScheduleTimes,
) -> None:
    """Open every Firestore channel and let the emulator's JIT settle, untimed."""
    chunks = -(-count // WARMUP_CHUNK)  # ceiling; none at all for count 0
    size = min(count, WARMUP_CHUNK)
    for chunk in range(chunks):
        for side in side_order(chunk):
            stream(servers[side].url, times, size, duplicate_share=0.3, seed=chunk)
            in_process_stream(in_process[side], times, max(1, size // 5))


def run_bench(
    config: BenchConfig,
    emulator: FirestoreEmulator | None = None,
    progress: Callable[[str], None] = print,
) -> Samples:
    """Measure both sides; start (and stop) an emulator unless one is given."""
    owned = emulator is None
    emulator = emulator or start_emulator()
    workdir = Path(tempfile.mkdtemp(prefix="bench-"))
    servers: dict[str, HandlerServer] = {}
    rtt_servers: dict[str, HandlerServer] = {}
    links: list[LatencyLink] = []
    every_server: dict[str, HandlerServer] = {}  # what to stop, by a name for the log
    try:
        with emulator.as_process_env():
            envs = {side: side_env(emulator, side, workdir) for side in SIDES}
            for side in SIDES:
                source, target = ENTRY_POINTS[side]
                servers[side] = start_handler(envs[side], source=source, target=target)
                every_server[side] = servers[side]
            if config.rtt_ms > 0:
                for side in SIDES:
                    # One link per side, so neither side's traffic queues behind the other's.
                    link = LatencyLink(emulator.host, config.rtt_ms).start()
                    links.append(link)
                    env = {**envs[side], "FIRESTORE_EMULATOR_HOST": link.host}
                    source, target = ENTRY_POINTS[side]
                    rtt_servers[side] = start_handler(env, source=source, target=target)
                    every_server[f"{side} (RTT)"] = rtt_servers[side]
            samples = _measure(config, emulator, envs, servers, rtt_servers, progress)
    except BaseException:
        for name, server in every_server.items():
            progress(f"{name} server log kept for inspection: {server.log_path}")
        raise
    else:
        for server in every_server.values():
            server.stop()
            server.log_path.unlink(missing_ok=True)
        return samples
    finally:
        for server in every_server.values():
            server.stop()
        for link in links:
            link.stop()
        if owned:
            emulator.stop()
            emulator.log_path.unlink(missing_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)


def _cold_starts(
    samples: Samples, envs: dict[str, dict[str, str]], times: ScheduleTimes, rep: int, count: int
) -> None:
    """`count` fresh processes per side, the side that goes first alternating."""
    for index in range(count):
        for side in side_order(rep + index):
            if rep == index == 0:  # compile bytecode once, unmeasured
                probe(*ENTRY_POINTS[side], envs[side], times)
            result = probe(*ENTRY_POINTS[side], envs[side], times)
            samples.add("coldstart", "fresh process", side, asdict(result))


def run_coldstart(
    config: BenchConfig,
    emulator: FirestoreEmulator | None = None,
    progress: Callable[[str], None] = print,
) -> Samples:
    """The cold start alone (`make bench ARGS=--coldstart`); starts an emulator unless given.

    The emulator is warmed in-process first, as the whole run's warm-up does before
    its probes, so each side's first answer pays its RPCs at the steady state.
    """
    owned = emulator is None
    emulator = emulator or start_emulator()
    workdir = Path(tempfile.mkdtemp(prefix="bench-"))
    try:
        with emulator.as_process_env():
            envs = {side: side_env(emulator, side, workdir) for side in SIDES}
            samples = Samples(config=asdict(config), machine=describe())
            times = ScheduleTimes()
            setup_client = firestore.Client(project=emulator.project)
            progress(f"warming up: {config.warmup_deliveries} in-process deliveries per side")
            for side in SIDES:
                client = firestore.Client(project=emulator.project)
                side_app = make_side(side, envs[side], client, setup_client)
                in_process_stream(side_app, times, config.warmup_deliveries)
            reps = min(config.reps, config.coldstart_reps)  # as many as the whole run's
            for rep in range(reps):
                samples.order.append(list(side_order(rep)))
                _cold_starts(samples, envs, times, rep, config.coldstart_per_rep)
                progress(f"cold start repetition {rep + 1}/{reps} done")
            return samples
    finally:
        if owned:
            emulator.stop()
            emulator.log_path.unlink(missing_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)


def _measure(
    config: BenchConfig,
    emulator: FirestoreEmulator,
    envs: dict[str, dict[str, str]],
    servers: dict[str, HandlerServer],
    rtt_servers: dict[str, HandlerServer],
    progress: Callable[[str], None],
) -> Samples:
    samples = Samples(config=asdict(config), machine=describe())
    times = ScheduleTimes()
    setup_client = firestore.Client(project=emulator.project)
    counters: dict[str, tuple[RpcCounter, OpCounter]] = {}
    in_process: dict[str, InProcessSide] = {}
    counted_clients: dict[str, firestore.Client] = {}
    for side in SIDES:
        counted = counted_clients[side] = firestore.Client(project=emulator.project)
        counters[side] = (RpcCounter().attach(counted), OpCounter().attach(counted))
        env = {**envs[side], COLLECTION_ENV: f"rpc_{side}_runs"}
        in_process[side] = make_side(side, env, counted, setup_client)
    progress(f"warming up: {config.warmup_deliveries} deliveries per side")
    _warm_up(config.warmup_deliveries, servers, in_process, times)
    if rtt_servers:
        progress(
            f"warming up the RTT {config.rtt_ms:g} ms servers: "
            f"{config.rtt_warmup_deliveries} deliveries per side"
        )
        for side in SIDES:
            count = config.rtt_warmup_deliveries
            stream(rtt_servers[side].url, times, count, duplicate_share=0.3, seed=-1)
    exec_logs = {side: Path(envs[side][EXEC_LOG_ENV]) for side in SIDES}

    for rep in range(config.reps):
        order = side_order(rep)
        samples.order.append(list(order))
        started = time.perf_counter()
        for scenario in SCENARIOS:
            for side in order:
                rpc, ops = counters[side]
                result = measure(in_process[side], rpc, ops, scenario, times)
                samples.add("rpcs", scenario, side, asdict(result))
        for scenario in dupwait.SCENARIOS:
            rpc = counters["handler"][0]
            settings = in_process["handler"].settings
            waited = dupwait.measure_wait(
                settings, counted_clients["handler"], setup_client, rpc, scenario, times
            )
            samples.add("dupwait", scenario, "handler", asdict(waited))
        for scenario in overlap.SCENARIOS:
            settings = in_process["handler"].settings
            cost = overlap.measure(
                settings,
                counted_clients["handler"],
                setup_client,
                counters["handler"],
                scenario,
                times,
            )
            samples.add("overlap", scenario, "handler", asdict(cost))
        for n in config.contention_sizes:
            for side in order:
                result = storm(servers[side].url, exec_logs[side], n, times)
                samples.add("contention", str(n), side, asdict(result))
        streams = ((FIRST_STREAM, 0.0), (DUP_STREAM, config.duplicate_share))
        for variant, share in streams:
            for side in order:
                result = stream(servers[side].url, times, config.stream_requests, share, seed=rep)
                samples.add("latency", variant, side, asdict(result))
        for variant, share in streams if rtt_servers else ():
            for side in order:
                url = rtt_servers[side].url
                result = stream(url, times, config.stream_requests, share, seed=rep)
                samples.add("latency", rtt_variant(variant, config.rtt_ms), side, asdict(result))
        if rtt_servers:
            # What one round trip through a link really costs, relay overhead included.
            echo = measure_link_rtt(config.rtt_ms, count=config.link_echo_count)
            samples.add("link", "echo", "p50", percentile(echo, 0.5))
            samples.add("link", "echo", "p99", percentile(echo, 0.99))
        for side in order:
            result = in_process_stream(in_process[side], times, config.in_process_requests)
            samples.add("latency", IN_PROCESS, side, asdict(result))
        for side in order:
            result = floor_stream(servers[side].url, config.floor_requests)
            samples.add("latency", FLOOR, side, asdict(result))
        for clients in config.throughput_clients:
            for side in order:
                rate = throughput(servers[side].url, times, clients, config.throughput_requests)
                samples.add("throughput", str(clients), side, rate)
        if rep < config.coldstart_reps:
            _cold_starts(samples, envs, times, rep, config.coldstart_per_rep)
        took = time.perf_counter() - started
        progress(f"repetition {rep + 1}/{config.reps} done in {took:.1f} s")

    for jobs, runs in config.growth:
        for side in SIDES:
            size = measure_growth(side, envs[side], setup_client, GROWTH_JOBS[:jobs], runs, times)
            samples.add("ledger", f"{jobs}x{runs}", side, asdict(size))
    # The audit is the handler's alone: no baseline side.
    counted = firestore.Client(project=emulator.project)
    rpc, ops = RpcCounter().attach(counted), OpCounter().attach(counted)
    for audit_size in config.audit_sizes:
        progress(f"audit: {audit_size.label}")
        for cost in measure_audit(audit_size, counted, rpc, ops, setup_client, config.reps):
            samples.add("audit", audit_size.label, "handler", asdict(cost))
    for steady_size in config.steady_sizes:
        progress(f"audit from watermarks: {steady_size.label}")
        for steady in measure_steady(steady_size, counted, rpc, ops, setup_client):
            samples.add("audit_steady", steady_size.label, "handler", asdict(steady))
    progress(f"simulation: {config.simulation_seeds} seeds")
    rate = simulation.measure(config.simulation_seeds)
    samples.add("simulation", "memory store", "handler", asdict(rate))
    return samples
