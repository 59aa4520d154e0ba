"""Simulated time: one event loop, and requests as threads that take turns, one at a time.

Every in-flight request (a delivery, the audit's run, a catch-up inside it) is a
thread running the real handler code, but only the thread holding the loop's
baton runs: a job body "works" by sleeping on the fake clock, which hands the
baton back to the loop, and the loop moves the clock to its next event. So the
order of everything that happens is a function of the seed alone.

A task is killed (its instance died) by raising `Killed`, a BaseException the
handler's `except Exception` clauses never catch: it unwinds without another
store call, answers nothing and its renewals are dropped. Each task reads the
clock with its instance's skew (`Task.skew`), as each Cloud Run instance has its
own clock.
"""

from __future__ import annotations

import _thread
import heapq
import itertools
import threading
from collections.abc import Callable
from datetime import datetime, timedelta


def _baton() -> _thread.LockType:
    """A lock held until another thread releases it: the cheapest hand-over between threads."""
    lock = _thread.allocate_lock()
    lock.acquire()
    return lock


class Killed(BaseException):
    """The task's instance died: it never resumes, answers or renews."""


class Task:
    """One request in flight on its own instance (clock skew `skew`)."""

    def __init__(self, loop: Loop, name: str, skew: timedelta) -> None:
        self.loop = loop
        self.name = name
        self.skew = skew
        self.started = loop.now  # when the loop spawned it
        self.killed = False
        self.done = False
        self.cut_until: datetime | None = None  # its instance cannot reach the store until then
        self.saved = False  # it wrote an audit's watermarks (`store.FaultPlan.crash_after_save`)
        # How much longer its sleeps and renewals take: a request cut by Cloud Run's
        # timeout works on with its CPU throttled (`timeouts`).
        self.slowdown = 1.0
        self._turn = _baton()

    def kill(self) -> None:
        self.killed = True


class Loop:
    """The fake clock and its events; `run_until` drives them in time order."""

    def __init__(self, start: datetime) -> None:
        self.now = start
        self._events: list[tuple[datetime, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._back = _baton()
        self.current: Task | None = None
        self.crashes: list[str] = []
        self._tasks: list[Task] = []

    def clock(self) -> datetime:
        """The time as the calling task's instance reads it (the loop itself: no skew)."""
        task = self.current
        return self.now if task is None else self.now + task.skew

    def at(self, when: datetime, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (max(when, self.now), next(self._order), action))

    def after(self, delay: timedelta, action: Callable[[], None]) -> None:
        self.at(self.now + delay, action)

    def spawn(self, name: str, skew: timedelta, body: Callable[[Task], None]) -> Task:
        """Start `body` as a task now; it runs when the loop reaches it."""
        task = Task(self, name, skew)

        def main() -> None:
            task._turn.acquire()
            try:
                if not task.killed:
                    body(task)
            except Killed:
                pass
            except BaseException as exc:  # a crash of the real code: the oracle reports it
                self.crashes.append(f"{name}: {type(exc).__name__}: {exc}")
            finally:
                task.done = True
                self._back.release()

        threading.Thread(target=main, name=name, daemon=True).start()
        self._tasks.append(task)
        self.at(self.now, lambda: self._resume(task))
        return task

    def _resume(self, task: Task) -> None:
        if task.done:
            return
        previous, self.current = self.current, task
        task._turn.release()
        self._back.acquire()
        self.current = previous

    def sleep(self, delay: timedelta) -> None:
        """Called by the running task: let the loop run until `delay` has passed."""
        task = self.current
        if task is None:
            raise RuntimeError("sleep outside a task")
        self.at(self.now + delay * task.slowdown, lambda: self._resume(task))
        self._back.release()
        task._turn.acquire()
        if task.killed:
            raise Killed

    def run_until(self, end: datetime) -> None:
        while self._events and self._events[0][0] <= end:
            when, _, action = heapq.heappop(self._events)
            self.now = max(self.now, when)
            action()
        self.now = max(self.now, end)

    def drain(self) -> None:
        """End every task still waiting (a seed's end): each unwinds as killed, its thread ends."""
        self._events.clear()
        for task in self._tasks:
            if not task.done:
                task.kill()
                self._resume(task)
        self._tasks.clear()


class LoopRenewals:
    """`ledger.lease.Renewals` on the fake clock: each renewal runs as its owner's instance.

    A renewal of a killed task is dropped (a dead instance renews nothing); one
    that a fault kills kills its owner. Delays are rounded to a tenth of a second:
    the keeper subtracts its renewal's duration on the real clock, which must not
    decide the order of simulated events.
    """

    def __init__(self, loop: Loop) -> None:
        self._loop = loop

    def after(self, delay_s: float, renew: Callable[[], None]) -> None:
        owner = self._loop.current

        def fire() -> None:
            if owner is None or owner.killed or owner.done:
                return
            previous, self._loop.current = self._loop.current, owner
            try:
                renew()
            except Killed:
                owner.kill()
            finally:
                self._loop.current = previous

        slowdown = 1.0 if owner is None else owner.slowdown
        self._loop.after(timedelta(seconds=round(delay_s * slowdown, 1)), fire)
