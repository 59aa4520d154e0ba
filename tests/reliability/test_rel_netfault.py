"""The cuttable link itself, without an emulator: relays, resets on cut, refuses while down.

The outage tests rely on `TcpLink` behaving like a network path that drops and
comes back; a local echo server stands in for Firestore here so that a broken
link fails quickly and by name, not as a confusing ledger outcome.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.reliability.netfault import TcpLink


@pytest.fixture
def echo_address() -> Iterator[str]:
    """A loopback echo server, one thread per connection, until the test ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stopping = threading.Event()

    def serve(connection: socket.socket) -> None:
        connection.settimeout(10)
        with connection:
            try:
                while data := connection.recv(65536):
                    connection.sendall(data)
            except OSError:
                return

    def accept() -> None:
        while not stopping.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(connection,), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    stopping.set()
    acceptor.join(timeout=5)
    listener.close()


def _connect(link: TcpLink) -> socket.socket:
    host, _, port = link.host.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=5)


def _round_trip(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    received = b""
    while len(received) < len(payload):
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


def _exchange_fails(sock: socket.socket) -> bool:
    """True if what is sent does not come back: the connection was reset or ended."""
    try:
        return _round_trip(sock, b"anyone?") != b"anyone?"
    except OSError:
        return True


def test_relays_both_ways(echo_address: str) -> None:
    with TcpLink.in_front_of(echo_address) as link, _connect(link) as client:
        assert _round_trip(client, b"hello") == b"hello"


def test_cut_resets_open_connections_refuses_new_ones_and_restore_reopens(
    echo_address: str,
) -> None:
    with TcpLink.in_front_of(echo_address) as link:
        with _connect(link) as before:
            assert _round_trip(before, b"ping") == b"ping"
            link.cut()
            # The relay's end is gone: the next exchange is reset, as over a dropped path.
            with pytest.raises(ConnectionResetError):
                _round_trip(before, b"after the cut")
        with _connect(link) as during:
            assert _exchange_fails(during)
        link.restore()
        with _connect(link) as after:
            assert _round_trip(after, b"back") == b"back"


def test_close_is_prompt_with_a_connection_still_open(echo_address: str) -> None:
    link = TcpLink.in_front_of(echo_address)
    with _connect(link) as client:
        assert _round_trip(client, b"x") == b"x"
        started = time.monotonic()
        link.close()
        assert time.monotonic() - started < 2
