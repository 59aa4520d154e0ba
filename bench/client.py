"""A keep-alive HTTP client for one simulated Scheduler connection.

Each benchmark client thread owns one persistent connection, opened and
warmed before the clock starts, so connection set-up is not in the timings.
gunicorn closes idle keep-alive connections after 2 s; a request on a
connection the server has closed is sent again once on a fresh one (a
repeated delivery is exactly what both sides are built to absorb).
"""

from __future__ import annotations

import http.client
import time
from urllib.parse import urlsplit

from bench.schedule import Headers

_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class Connection:
    def __init__(self, url: str, timeout_s: float = 120.0) -> None:
        parts = urlsplit(url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        self._timeout_s = timeout_s
        self._conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout_s)

    def warm(self) -> None:
        """Open the connection with a GET that both sides refuse without touching Firestore."""
        self._request("GET", [])

    def post(self, headers: Headers) -> tuple[int, float]:
        """Send one delivery; return its status and seconds until the answer was read."""
        return self._timed("POST", headers)

    def get(self) -> tuple[int, float]:
        """A request both sides refuse before any Firestore call: the server's own cost."""
        return self._timed("GET", [])

    def _timed(self, method: str, headers: Headers) -> tuple[int, float]:
        started = time.perf_counter()
        try:
            status = self._request(method, headers)
        except _STALE:
            self._conn.close()
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
            started = time.perf_counter()
            status = self._request(method, headers)
        return status, time.perf_counter() - started

    def close(self) -> None:
        self._conn.close()

    def _request(self, method: str, headers: Headers) -> int:
        self._conn.request(method, "/", body=b"", headers=dict(headers))
        response = self._conn.getresponse()
        response.read()
        return response.status
