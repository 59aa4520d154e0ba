"""A loopback TCP relay that adds a fixed round-trip time, to model a network hop.

On loopback the Firestore emulator answers an RPC in well under a millisecond,
so a ledger that makes 2 RPCs per delivery and one that makes 6 differ by
only a few milliseconds, which the fixed HTTP cost then dilutes. Production
Firestore is a network round trip away from Cloud Run, so each RPC costs at
least one RTT. Putting this relay between a served process and the emulator
makes every gRPC request and response pay that RTT for real, rather than
adding RPC count x RTT on paper: whatever the client library actually does
on the wire (HTTP/2 frames, flow-control updates, extra calls) pays it too.

Each accepted connection gets one upstream connection to the emulator and,
per direction, a reader thread that stamps every chunk it receives with a due
time (arrival + RTT / 2) and a writer thread that sends chunks in arrival
order once they are due. One FIFO per direction keeps the byte order intact
(due times only grow, since the delay is constant), and the two directions
are independent, as on a real full-duplex link. Bandwidth is not modelled:
a chunk is never delayed by the chunks in front of it beyond its own due time.

Everything stays on 127.0.0.1. Every loop ends on end-of-stream, a socket
error or `stop()`; the blocking waits use short timeouts so `stop()` is seen.
The listener, accept loop and teardown are `scheduler_dedup.localrun.tcprelay.TcpRelay`,
shared with the reliability tests' cuttable link; only the pumps are here.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from dataclasses import dataclass, field

from scheduler_dedup.localrun.tcprelay import LOOPBACK, TcpRelay

CHUNK_BYTES = 65536
# How often a blocked accept or an idle writer looks at the stop flag.
POLL_S = 0.2
_EOF = b""


def _nodelay(sock: socket.socket) -> socket.socket:
    """Send each chunk as soon as it is due: Nagle would add its own, unmodelled delay."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


@dataclass
class _Direction:
    """One direction of one relayed connection: source -> (delay) -> destination."""

    source: socket.socket
    destination: socket.socket
    delay_s: float
    stopping: threading.Event
    chunks: queue.SimpleQueue[tuple[float, bytes]] = field(default_factory=queue.SimpleQueue)

    def read(self) -> None:
        """Stamp each chunk with its due time; an empty chunk marks end-of-stream."""
        try:
            while not self.stopping.is_set():
                data = self.source.recv(CHUNK_BYTES)
                self.chunks.put((time.monotonic() + self.delay_s, data))
                if not data:
                    return
        except OSError:
            self.chunks.put((time.monotonic(), _EOF))

    def write(self) -> None:
        """Send chunks in arrival order, each no earlier than its due time."""
        try:
            while not self.stopping.is_set():
                try:
                    due, data = self.chunks.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if not data:
                    # Pass the half-close on, so the other end sees the same EOF.
                    with contextlib.suppress(OSError):
                        self.destination.shutdown(socket.SHUT_WR)
                    return
                self.destination.sendall(data)
        except OSError:
            # The far end is gone: stop the reader too rather than queue for nobody.
            with contextlib.suppress(OSError):
                self.source.shutdown(socket.SHUT_RD)


class LatencyLink(TcpRelay):
    """Relay 127.0.0.1:<port> to `upstream` ("host:port"), adding `rtt_ms` per round trip.

    `host` is what to put in FIRESTORE_EMULATOR_HOST instead of the emulator's
    own address. Use as a context manager, or call `start()` and `stop()`.
    Listening, accepting and teardown come from `scheduler_dedup.localrun.tcprelay.TcpRelay`;
    this class adds only the delayed, order-keeping pumps.
    """

    thread_name = "latency-link"
    accept_poll_s = POLL_S
    connect_timeout_s = 10

    def __init__(self, upstream: str, rtt_ms: float) -> None:
        if rtt_ms < 0:
            raise ValueError("rtt_ms must be >= 0")
        upstream_host, _, upstream_port = upstream.rpartition(":")
        super().__init__((upstream_host or LOOPBACK, int(upstream_port)))
        self.rtt_ms = rtt_ms
        self._delay_s = rtt_ms / 2000  # half the round trip in each direction

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        _nodelay(client)
        _nodelay(server)
        # The sockets stay open until `stop()`, which shuts them down and so wakes
        # every reader and writer; `stop()` then waits for these threads.
        for direction in (
            _Direction(client, server, self._delay_s, self._stopping),
            _Direction(server, client, self._delay_s, self._stopping),
        ):
            for kind, work in (("read", direction.read), ("write", direction.write)):
                self._spawn(f"latency-link-{kind}", work)


def _echo(listener: socket.socket) -> None:
    """Serve one connection, sending back whatever arrives, until the client closes."""
    try:
        connection, _ = listener.accept()
        with connection:
            while data := connection.recv(CHUNK_BYTES):
                connection.sendall(data)
    except OSError:
        return  # no client came, or the link was torn down first: the caller reports it


def measure_link_rtt(rtt_ms: float, count: int = 100, size: int = 100) -> list[float]:
    """Round trips of `size`-byte messages through a link to a local echo server, in seconds.

    The relay's own cost (thread hand-offs, timer slack) comes on top of the
    modelled RTT; measuring it lets the report say how many round trips a
    side's latency actually paid, rather than dividing by the nominal figure.
    """
    payload = b"x" * size
    listener = socket.create_server((LOOPBACK, 0))
    listener.settimeout(10)
    server = threading.Thread(target=_echo, args=(listener,), daemon=True)
    server.start()
    round_trips: list[float] = []
    try:
        with LatencyLink(f"{LOOPBACK}:{listener.getsockname()[1]}", rtt_ms) as link:
            host, _, port = link.host.rpartition(":")
            with _nodelay(socket.create_connection((host, int(port)), timeout=10)) as client:
                for _ in range(count):
                    started = time.perf_counter()
                    client.sendall(payload)
                    received = 0
                    while received < size:
                        chunk = client.recv(size - received)
                        if not chunk:
                            raise ConnectionError("echo closed the connection early")
                        received += len(chunk)
                    round_trips.append(time.perf_counter() - started)
    finally:
        server.join(timeout=5)
        listener.close()
    return round_trips
