"""Keeps a claim's lease alive in the background while the job runs.

The lease must outlast the request (Cloud Run keeps running code after a
request timeout), so it is renewed every third of its length; a first
delivery whose work ends sooner pays no renewal RPC at all.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from runledger.exceptions import LeaseLost, StoreUnavailable
from runledger.ledger import Claim, Ledger

R = TypeVar("R")
# Renewals that may be in flight at once; more wait their turn for a worker.
_RENEWAL_WORKERS = 4


class _RenewalScheduler:
    """One timer thread per process hands due renewals to a few reused workers.

    Starting a thread for every delivery costs as much as a Firestore RPC on a
    busy instance, on the hot path of every run; renewals are rare (only work
    that outlasts a third of the lease has any), so they share these threads.
    """

    def __init__(self) -> None:
        self._wakeup = threading.Condition()
        self._due: list[tuple[float, int, LeaseKeeper]] = []
        self._order = itertools.count()
        self._timer: threading.Thread | None = None
        self._workers = ThreadPoolExecutor(_RENEWAL_WORKERS, "lease-renewal")

    def after(self, delay_s: float, keeper: LeaseKeeper) -> None:
        with self._wakeup:
            heapq.heappush(self._due, (time.monotonic() + delay_s, next(self._order), keeper))
            if self._timer is None:
                self._timer = threading.Thread(target=self._run, name="lease-timer", daemon=True)
                self._timer.start()
            self._wakeup.notify()

    def _run(self) -> None:
        while True:
            with self._wakeup:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._wakeup.wait(self._due[0][0] - time.monotonic() if self._due else None)
                keeper = heapq.heappop(self._due)[2]
            self._workers.submit(keeper._renew_on_schedule)


_SCHEDULER = _RenewalScheduler()


class LeaseKeeper:
    def __init__(self, ledger: Ledger, claim: Claim, on_lost: Callable[[str], None]) -> None:
        self._ledger = ledger
        self._claim = claim
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._lost_reason: str | None = None
        # A renewal failed with its outcome unknown: it may have landed and moved
        # the run's version, so re-read before the next fenced write.
        self._unsure = False
        self._stopped = False

    @property
    def claim(self) -> Claim:
        with self._lock:
            return self._claim

    def held(self) -> bool:
        """True while no takeover was seen and the lease has not run out by our clock.

        After a renewal whose outcome is unknown the lease may have been extended
        without our knowing, so the record is read back first: giving up a run that
        is still ours would block it until that unseen lease runs out.
        """
        newly_lost = None
        with self._lock:
            if self._lost_reason is None and self._unsure:
                try:
                    self._resync()
                except LeaseLost as exc:
                    newly_lost = self._lost_reason = str(exc)
                except StoreUnavailable:
                    pass  # still unknown: judge by the lease we know of
            held = self._lost_reason is None and self._ledger.now() < self._claim.lease_expires
        if newly_lost is not None:
            self._on_lost(newly_lost)
        return held

    @property
    def _interval_s(self) -> float:
        return self._ledger.lease.total_seconds() / 3

    def start(self) -> None:
        _SCHEDULER.after(self._interval_s, self)

    def halt(self) -> None:
        """Renew no more; a renewal under way finishes first."""
        with self._lock:
            self._stopped = True

    def stop(self) -> Claim:
        """Stop renewing and return the latest claim, for the final fenced write."""
        self.halt()
        with self._lock:
            if self._unsure and self._lost_reason is None:
                # On failure the final fenced write finds out and answers for it.
                with contextlib.suppress(LeaseLost, StoreUnavailable):
                    self._resync()
            return self._claim

    def renew_now(self) -> None:
        """Renew once; a renewal that finds the run taken over marks the lease lost."""
        with self._lock:
            if self._lost_reason is not None or self._stopped:
                return
            try:
                if self._unsure:
                    self._resync()
                self._claim = self._ledger.renew(self._claim)
            except LeaseLost as exc:
                self._lost_reason = str(exc)
            except StoreUnavailable:
                # Try again next round; held() turns false when the lease runs out.
                self._unsure = True
                return
        if self._lost_reason is not None:
            self._on_lost(self._lost_reason)

    @property
    def ledger(self) -> Ledger:
        return self._ledger

    def fenced_write(self, write: Callable[[Claim], tuple[Claim, R]]) -> R:
        """Run one write fenced by the current claim and adopt the claim it returns.

        `write` gets the claim and returns the claim after its write (a fenced
        write changes the run's version) with its own result. Holding the lock
        keeps the renewal thread from using a version this write is replacing.
        A LeaseLost from `write` marks the lease lost, as a failed renewal does;
        a StoreUnavailable leaves the outcome unknown, as an unanswered renewal does.
        """
        with self._lock:
            if self._lost_reason is not None:
                raise LeaseLost(self._lost_reason)
            try:
                if self._unsure:
                    self._resync()
                self._claim, result = write(self._claim)
            except LeaseLost as exc:
                self._lost_reason = str(exc)
                lost = exc
            except StoreUnavailable:
                self._unsure = True
                raise
            else:
                return result
        self._on_lost(str(lost))
        raise lost

    def _resync(self) -> None:
        """Call with the lock held."""
        self._claim = self._ledger.resync(self._claim)
        self._unsure = False

    def _renew_on_schedule(self) -> None:
        self.renew_now()
        with self._lock:
            if self._stopped or self._lost_reason is not None:
                return
        _SCHEDULER.after(self._interval_s, self)
