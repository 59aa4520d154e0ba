"""A loopback TCP relay: the listening, accepting and teardown every relay shares.

Tests and benchmarks put a relay between a served process and the Firestore
emulator to change what the network does: cut it (`tests.reliability.netfault`)
or slow it down (`bench.latency_link`). Those relays differ only in how bytes
move between a client and its upstream connection. Listening on a free
loopback port, connecting upstream for each client, remembering the sockets
and threads, and tearing it all down are the same in both, so that code lives
here once and a fix to the teardown reaches both.

A subclass implements `_relay(client, upstream)`, which starts the threads
that move bytes (with `_spawn`) and returns. It may also refuse new
connections (`_admit`) and choose how open connections are closed (`_drop`).
Class attributes set the accept poll interval, upstream connect timeout,
listen backlog and acceptor thread name, because the two relays were tuned
separately and keep their own values.

Everything stays on 127.0.0.1. The accept loop ends on `stop()` or a listener
error, and accept waits at most `accept_poll_s`, so `stop()` is seen promptly.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Self

LOOPBACK = "127.0.0.1"
# The longest `stop()` waits for any one thread, so a wedged thread cannot hang it.
JOIN_TIMEOUT_S = 5


class TcpRelay:
    """Relay 127.0.0.1:<free port> to `upstream`, one upstream connection per client.

    `host` ("127.0.0.1:<port>") is the address to give clients instead of the
    upstream's. Use as a context manager, or call `start()` and `stop()`.
    """

    thread_name = "tcp-relay"
    accept_poll_s: float = 0.2
    connect_timeout_s: float = 10
    backlog: int | None = None  # None: the socket module's default

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._stopping = threading.Event()
        self._listener = socket.create_server((LOOPBACK, 0), backlog=self.backlog)
        self._listener.settimeout(self.accept_poll_s)
        # Kept as a plain attribute, so `host` still answers after the listener is closed.
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(
            target=self._accept_loop, name=self.thread_name, daemon=True
        )

    @property
    def host(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def start(self) -> Self:
        """Start accepting. A second call does nothing, so a started relay can enter `with`."""
        if self._acceptor.ident is None:
            self._acceptor.start()
        return self

    def stop(self) -> None:
        """Stop accepting, close every relayed connection, then wait for the relay threads.

        The acceptor is joined before the connections are dropped, so a client it
        accepts while stopping is dropped with the rest rather than left open.
        """
        self._stopping.set()
        if self._acceptor.ident is not None:
            self._acceptor.join(timeout=JOIN_TIMEOUT_S)
        self._listener.close()
        self._drop_all()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=JOIN_TIMEOUT_S)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # Hooks for subclasses.

    def _admit(self) -> bool:
        """Whether to relay a newly accepted client; a refused one is closed at once."""
        return True

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        """Start moving bytes between `client` and `upstream`, then return.

        Both sockets are blocking and already tracked, so `stop()` closes them.
        """
        raise NotImplementedError

    def _drop(self, sockets: Iterable[socket.socket]) -> None:
        """Close relayed sockets. Shutting down first wakes any thread blocked on them."""
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    # Helpers for subclasses.

    def _spawn(
        self, name: str, target: Callable[..., object], *args: object, join_on_stop: bool = True
    ) -> None:
        """Start a daemon relay thread. `stop()` waits for it unless `join_on_stop` is False."""
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        if join_on_stop:
            with self._lock:
                self._threads.append(thread)
        thread.start()

    def _forget(self, *sockets: socket.socket) -> None:
        """Stop tracking sockets that the relay has closed itself."""
        with self._lock:
            self._sockets.difference_update(sockets)

    def _drop_all(self) -> None:
        """Close every tracked connection now; the relay goes on accepting."""
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        self._drop(sockets)

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._admit():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=self.connect_timeout_s)
            except OSError:
                # The upstream is gone: the client sees its connection end, as it would.
                client.close()
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
            self._relay(client, upstream)
