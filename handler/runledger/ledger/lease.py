"""Keeps a claim's lease alive in the background while the job runs: a heartbeat.

A claim's lease is short (DEDUP_HEARTBEAT_SECONDS, 60 s as the stack deploys
it) and renewed every third of its length for as long as the job runs, so a
holder that dies stops blocking its run within one lease, while a live one
keeps it: Cloud Run allocates CPU to an instance while it processes a request,
background threads included ("CPU allocation", Cloud Run docs), so this
heartbeat beats for as long as the holder's request is alive. Renewals keep a
fixed rate (each is due one interval after the previous one began, not after
it ended), so one renewal that fails after a store call's full deadline still
leaves the next one time to land. A first delivery whose work ends within a
third of the lease pays no renewal RPC at all.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from runledger.exceptions import LeaseLost, StoreUnavailable
from runledger.ledger.machine import Ledger
from runledger.ledger.run import Claim

R = TypeVar("R")
# Renewals that may be in flight at once; more wait their turn for a worker.
_RENEWAL_WORKERS = 4


class Renewals(Protocol):
    """Runs a keeper's next renewal later; the keeper schedules the one after."""

    def after(self, delay_s: float, renew: Callable[[], None]) -> None:
        """Call `renew` once, about `delay_s` seconds from now, off the caller's thread."""


class RenewalScheduler:
    """One timer thread hands due renewals to a few reused workers.

    Starting a thread for every delivery costs as much as a Firestore RPC on a
    busy instance, on the hot path of every run; renewals are rare (only work
    that outlasts a third of the lease has any), so the runs of an App share
    these threads. Nothing starts until the first renewal is scheduled.
    """

    def __init__(self) -> None:
        self._wakeup = threading.Condition()
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._timer: threading.Thread | None = None
        self._workers = ThreadPoolExecutor(_RENEWAL_WORKERS, "lease-renewal")

    def after(self, delay_s: float, renew: Callable[[], None]) -> None:
        with self._wakeup:
            heapq.heappush(self._due, (time.monotonic() + delay_s, next(self._order), renew))
            if self._timer is None:
                self._timer = threading.Thread(target=self._run, name="lease-timer", daemon=True)
                self._timer.start()
            self._wakeup.notify()

    def _run(self) -> None:
        while True:
            with self._wakeup:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._wakeup.wait(self._due[0][0] - time.monotonic() if self._due else None)
                renew = heapq.heappop(self._due)[2]
            self._workers.submit(renew)


class LeaseKeeper:
    def __init__(
        self,
        ledger: Ledger,
        claim: Claim,
        on_lost: Callable[[str], None],
        renewals: Renewals,
    ) -> None:
        self._ledger = ledger
        self._claim = claim
        self._on_lost = on_lost
        self._renewals = renewals
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
        with self._lock:
            failure = self._guarded(None)[1] if self._lost_reason is None else None
            held = self._lost_reason is None and self._ledger.now() < self._claim.lease_expires
        self._report(failure)
        return held

    @property
    def _interval_s(self) -> float:
        return self._ledger.claim_lease.total_seconds() / 3

    def start(self) -> None:
        self._renewals.after(self._interval_s, self._renew_on_schedule)

    def halt(self) -> None:
        """Renew no more; a renewal under way finishes first."""
        with self._lock:
            self._stopped = True

    @property
    def renewing(self) -> bool:
        """True until halted or the lease is found lost: a renewal is still scheduled."""
        with self._lock:
            return not self._stopped and self._lost_reason is None

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
        """Renew once; a renewal that finds the run taken over marks the lease lost.

        An unanswered renewal is tried again next round; held() turns false when
        the lease runs out meanwhile.
        """
        with self._lock:
            if self._lost_reason is not None or self._stopped:
                return
            failure = self._guarded(lambda claim: (self._ledger.renew(claim), None))[1]
        self._report(failure)

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
            result, failure = self._guarded(write)
        self._report(failure)
        if failure is not None:
            raise failure
        return result

    def _guarded(
        self, write: Callable[[Claim], tuple[Claim, R]] | None
    ) -> tuple[R | None, LeaseLost | StoreUnavailable | None]:
        """Call with the lock held: settle an unknown outcome, then do `write`, if any.

        A LeaseLost marks the lease lost for good; a StoreUnavailable leaves the
        outcome unknown, so the record is read back before the next fenced write.
        """
        try:
            if self._unsure:
                self._resync()
            if write is None:
                return None, None
            self._claim, result = write(self._claim)
            return result, None
        except LeaseLost as exc:
            self._lost_reason = str(exc)
            return None, exc
        except StoreUnavailable as exc:
            self._unsure = True
            return None, exc

    def _report(self, failure: LeaseLost | StoreUnavailable | None) -> None:
        """Tell the owner of a newly lost lease, outside the lock."""
        if isinstance(failure, LeaseLost):
            self._on_lost(str(failure))

    def _resync(self) -> None:
        """Call with the lock held."""
        self._claim = self._ledger.resync(self._claim)
        self._unsure = False

    def _renew_on_schedule(self) -> None:
        # Timed by the ledger's clock, the one that dates the lease: a renewal is due a
        # third of a lease after the last began, and a fake clock replays it exactly.
        began = self._ledger.now()
        self.renew_now()
        if self.renewing:
            took = (self._ledger.now() - began).total_seconds()
            self._renewals.after(max(0.0, self._interval_s - took), self._renew_on_schedule)
