"""A loopback TCP relay between the handler and the Firestore emulator that can be cut.

Stopping the emulator loses its data (it keeps everything in memory), so a
"Firestore comes back" test that needs the ledger's records to survive the
outage cuts the network instead: `cut()` resets every relayed connection and
refuses new ones until `restore()`, while the emulator and its data live on.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

_ACCEPT_POLL_S = 0.1
_CHUNK = 65536
# Linger on, timeout 0: close() sends RST, like a dropped network path.
_RESET = struct.pack("ii", 1, 0)


class TcpLink:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(_ACCEPT_POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self._up = threading.Event()
        self._up.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept_loop, name="tcp-link", daemon=True)
        self._thread.start()

    @classmethod
    def in_front_of(cls, address: str) -> TcpLink:
        """A link to `address` given as `host:port`, as the emulator's host is written."""
        host, port = address.rsplit(":", 1)
        return cls(host, int(port))

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Reset every open connection and refuse new ones: Firestore is unreachable."""
        self._up.clear()
        self._drop_all()

    def restore(self) -> None:
        self._up.set()

    def close(self) -> None:
        self._closed.set()
        self._drop_all()
        self._thread.join(timeout=5)
        self._listener.close()

    def __enter__(self) -> TcpLink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _drop_all(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            with contextlib.suppress(OSError):
                sock.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._up.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=2)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(_CHUNK)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._sockets.discard(src)
                self._sockets.discard(dst)
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.close()
