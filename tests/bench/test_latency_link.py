"""The latency relay delays each round trip by the modelled RTT and keeps byte order.

No emulator needed: a local echo server stands in for Firestore, so this
checks the relay itself, quickly, apart from anything it is used to measure.
"""

from __future__ import annotations

import socket
import threading

from bench.latency_link import LatencyLink, measure_link_rtt


def test_every_round_trip_pays_the_modelled_rtt():
    round_trips = measure_link_rtt(rtt_ms=5.0, count=10)

    assert len(round_trips) == 10
    assert min(round_trips) >= 0.005
    # Generous: the relay's own overhead is sub-millisecond, but the CI box is shared.
    assert sorted(round_trips)[len(round_trips) // 2] < 0.1


def test_many_chunks_arrive_whole_and_in_order_both_ways():
    payload = bytes(range(256)) * 4096  # 1 MiB: many recv chunks in each direction
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)

    def echo() -> None:
        connection, _ = listener.accept()
        with connection:
            while data := connection.recv(65536):
                connection.sendall(data)

    server = threading.Thread(target=echo, daemon=True)
    server.start()
    with LatencyLink(f"127.0.0.1:{listener.getsockname()[1]}", rtt_ms=1.0) as link:
        host, _, port = link.host.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=10) as client:
            client.sendall(payload)
            client.shutdown(socket.SHUT_WR)  # the half-close must reach the echo server
            received = bytearray()
            while chunk := client.recv(65536):
                received += chunk
    server.join(timeout=10)
    listener.close()

    assert bytes(received) == payload
    assert not server.is_alive()
