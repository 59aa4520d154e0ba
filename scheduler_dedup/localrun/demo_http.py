"""The simulator's thin HTTP edge: send deliveries to the local handler, concurrently.

A request that gets no answer within the attempt deadline is reported as a
timeout (status None) and abandoned, as Cloud Scheduler abandons it: the
connection closes, but the handler keeps working on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import requests

from scheduler_dedup.localrun.simulator import Answer, Request

_CONNECT_TIMEOUT_S = 2.0
# A proxy's copies trail the original by a few milliseconds: still concurrent
# with it (the claim takes longer), but the original usually arrives first.
_COPY_LAG_S = 0.005


class HttpTransport:
    def __init__(self, url: str) -> None:
        self.url = url

    def _send(self, request: Request, timeout_s: float) -> Answer:
        started = time.monotonic()
        try:
            response = requests.post(
                self.url,
                data=request.body,
                headers=dict(request.headers),
                timeout=(_CONNECT_TIMEOUT_S, timeout_s),
            )
        except requests.Timeout:
            return Answer(None, None, time.monotonic() - started)
        except requests.ConnectionError as exc:
            # The handler went away (or refused): Scheduler sees it like a timeout.
            return Answer(
                None, f"connection error: {type(exc).__name__}", time.monotonic() - started
            )
        latency = time.monotonic() - started
        try:
            outcome = response.json().get("outcome")
        except ValueError:
            outcome = None
        return Answer(response.status_code, outcome, latency)

    def send_all(self, requests_: Sequence[Request], timeout_s: float) -> list[Answer]:
        if len(requests_) == 1:
            return [self._send(requests_[0], timeout_s)]
        answers: list[Answer | None] = [None] * len(requests_)
        start = threading.Barrier(len(requests_))

        def send(index: int) -> None:
            start.wait()  # release the copies together: a burst, not a sequence
            if index:
                time.sleep(_COPY_LAG_S)
            answers[index] = self._send(requests_[index], timeout_s)

        threads = [
            threading.Thread(target=send, args=(i,), daemon=True) for i in range(len(requests_))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [a if a is not None else Answer(None, "not sent", 0.0) for a in answers]
