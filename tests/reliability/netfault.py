"""A loopback TCP relay between the handler and the Firestore emulator that can be cut.

Stopping the emulator loses its data (it keeps everything in memory), so a
"Firestore comes back" test that needs the ledger's records to survive the
outage cuts the network instead: `cut()` resets every relayed connection and
refuses new ones until `restore()`, while the emulator and its data live on.

Listening, accepting and the socket bookkeeping come from
`scheduler_dedup.localrun.tcprelay.TcpRelay`, shared with the benchmarks' latency relay; this
module adds only what a cut needs: refusing clients while down, resetting
rather than closing connections, and a pump that ends the whole connection
when either side ends.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterable

from scheduler_dedup.localrun.tcprelay import TcpRelay

_CHUNK = 65536
# Linger on, timeout 0: close() sends RST, like a dropped network path.
_RESET = struct.pack("ii", 1, 0)


class TcpLink(TcpRelay):
    """Relay to the emulator, started on construction; `close()` or `with` ends it."""

    thread_name = "tcp-link"
    accept_poll_s = 0.1
    connect_timeout_s = 2
    backlog = 64

    def __init__(self, target_host: str, target_port: int) -> None:
        super().__init__((target_host, target_port))
        self._up = threading.Event()
        self._up.set()
        self._answering = threading.Event()
        self._answering.set()
        self.start()

    @classmethod
    def in_front_of(cls, address: str) -> TcpLink:
        """A link to `address` given as `host:port`, as the emulator's host is written."""
        host, port = address.rsplit(":", 1)
        return cls(host, int(port))

    def cut(self) -> None:
        """Reset every open connection and refuse new ones: Firestore is unreachable."""
        self._up.clear()
        self._drop_all()

    def restore(self) -> None:
        self._up.set()
        self._answering.set()

    def swallow_answers(self) -> None:
        """Deliver requests, discard what comes back: a write lands, its answer is lost.

        The discarded bytes leave the open connections unusable; `cut()` them next.
        """
        self._answering.clear()

    def close(self) -> None:
        self.stop()

    def _admit(self) -> bool:
        return self._up.is_set()

    def _drop(self, sockets: Iterable[socket.socket]) -> None:
        """Reset rather than close, so each peer sees a dropped path, not an orderly end."""
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            with contextlib.suppress(OSError):
                sock.close()

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        # Not joined on stop: a reset socket does not wake a pump blocked in recv(),
        # so waiting for the pumps could hold `close()` for the join timeout.
        for src, dst, answers in ((client, upstream, False), (upstream, client, True)):
            self._spawn("tcp-link-pump", self._pump, src, dst, answers, join_on_stop=False)

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while True:
                data = src.recv(_CHUNK)
                if not data:
                    break
                if answers and not self._answering.is_set():
                    continue
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._forget(src, dst)
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.close()
