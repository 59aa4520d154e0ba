"""Keeps a claim's lease alive in the background while the job runs.

The lease must outlast the request (Cloud Run keeps running code after a
request timeout), so it is renewed every third of its length; a first
delivery whose work ends sooner pays no renewal RPC at all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from runledger.exceptions import LeaseLost, StoreUnavailable
from runledger.ledger import Claim, Ledger


class LeaseKeeper:
    def __init__(self, ledger: Ledger, claim: Claim, on_lost: Callable[[str], None]) -> None:
        self._ledger = ledger
        self._claim = claim
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._lost_reason: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def claim(self) -> Claim:
        with self._lock:
            return self._claim

    def held(self) -> bool:
        """True while no takeover was seen and the lease has not run out by our clock."""
        with self._lock:
            return self._lost_reason is None and self._ledger.now() < self._claim.lease_expires

    def start(self) -> None:
        interval_s = self._ledger.lease.total_seconds() / 3
        self._thread = threading.Thread(
            target=self._run, args=(interval_s,), name="lease-renewal", daemon=True
        )
        self._thread.start()

    def stop(self) -> Claim:
        """Stop renewing and return the latest claim, for the final fenced write."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.claim

    def renew_now(self) -> None:
        """Renew once; a renewal that finds the run taken over marks the lease lost."""
        with self._lock:
            if self._lost_reason is not None:
                return
            try:
                self._claim = self._ledger.renew(self._claim)
            except LeaseLost as exc:
                self._lost_reason = str(exc)
            except StoreUnavailable:
                return  # try again next round; held() turns false when the lease runs out
        if self._lost_reason is not None:
            self._on_lost(self._lost_reason)

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.renew_now()
            if self._lost_reason is not None:
                return
