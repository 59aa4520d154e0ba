"""Simulated time: one event loop, and requests as threads that take turns, one at a time.

Every in-flight request (a delivery, the audit's run, a catch-up inside it) is a
thread running the real handler code, but only the thread holding the loop's
baton runs: a job body "works" by sleeping on the fake clock, and the loop moves
the clock to its next event. So the order of everything that happens is a
function of the seed alone.

The thread holding the baton runs the loop itself: a task going to sleep runs
the events due before its wake-up and hands the baton straight to the next task
due, or keeps it when that is itself; a task that ends passes it on, or runs a
task that was never started in its own thread (in a fresh context, as a new
thread would). A thread whose task ended waits for the next task to start, until
the loop drains. Which thread runs what never changes the order of events, only
how many threads start and hand over: those were most of a seed's time.

A task is killed (its instance died) by raising `Killed`, a BaseException the
handler's `except Exception` clauses never catch: it unwinds without another
store call, answers nothing and its renewals are dropped. Each task reads the
clock with its instance's skew (`Task.skew`), as each Cloud Run instance has its
own clock.
"""

from __future__ import annotations

import _thread
import contextvars
import heapq
import itertools
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

    def __init__(self, loop: Loop, name: str, skew: timedelta, body: Callable[[Task], None]):
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
        self._body = body
        self._running = False  # a thread runs its body (or has ended it)
        self._turn = _baton()

    def kill(self) -> None:
        self.killed = True


class _Worker:
    """A thread of the loop's: the task it is to run next (None: end), and its wake-up."""

    __slots__ = ("task", "wake")

    def __init__(self, task: Task) -> None:
        self.task: Task | None = task
        self.wake = _baton()


# An event: when, its place in the order, and an action to run or a task to resume.
_Event = tuple[datetime, int, Callable[[], None] | None, Task | None]


class Loop:
    """The fake clock and its events; `run_until` drives them in time order."""

    def __init__(self, start: datetime) -> None:
        self.now = start
        self._events: list[_Event] = []
        self._order = itertools.count()
        self._back = _baton()  # the caller of `run_until` (or `drain`) gets the baton back
        self._end: datetime | None = None  # `run_until`'s bound; None: no event runs
        self._error: BaseException | None = None  # an action's crash, raised to that caller
        self.current: Task | None = None
        self.crashes: list[str] = []
        self._tasks: list[Task] = []
        self._idle: list[_Worker] = []  # threads whose task ended, each waiting for another

    def clock(self) -> datetime:
        """The time as the calling task's instance reads it (the loop itself: no skew)."""
        task = self.current
        return self.now if task is None else self.now + task.skew

    def at(self, when: datetime, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (max(when, self.now), next(self._order), action, None))

    def after(self, delay: timedelta, action: Callable[[], None]) -> None:
        self.at(self.now + delay, action)

    def _wake(self, when: datetime, task: Task) -> None:
        heapq.heappush(self._events, (max(when, self.now), next(self._order), None, task))

    def spawn(self, name: str, skew: timedelta, body: Callable[[Task], None]) -> Task:
        """Start `body` as a task now; it runs when the loop reaches it."""
        task = Task(self, name, skew, body)
        self._tasks.append(task)
        self._wake(self.now, task)
        return task

    def sleep(self, delay: timedelta) -> None:
        """Called by the running task: let the loop run until `delay` has passed."""
        task = self.current
        if task is None:
            raise RuntimeError("sleep outside a task")
        self._wake(self.now + delay * task.slowdown, task)
        following = self._next(task)
        if following is not task:
            self._hand(following)
            task._turn.acquire()
        self.current = task
        if task.killed:
            raise Killed

    def run_until(self, end: datetime) -> None:
        self._end = end
        try:
            following = self._next(None)
            if following is not None:
                self._hand(following)
                self._back.acquire()
                self._raise_crash()
        finally:
            self._end = None
            self.current = None
        self.now = max(self.now, end)

    def drain(self) -> None:
        """End every task still waiting (a seed's end): each unwinds as killed, its thread ends."""
        self._events.clear()
        for task in self._tasks:
            if not task.done:
                task.kill()
                if task._running:
                    self._hand(task)
                    self._back.acquire()
                    self._raise_crash()
                else:
                    task.done = True  # never started: killed before its body ran
        self.current = None
        self._tasks.clear()
        for worker in self._idle:  # each thread ends, touching nothing
            worker.wake.release()
        self._idle.clear()

    def _next(self, me: Task | None) -> Task | None:
        """Run the due events in this thread (`me`'s) up to the first resuming a live task.

        Returns that task, or None when no event is due before `run_until`'s end: the
        baton then goes back to its caller. An action's crash goes back there too.
        """
        self.current = None
        while self._end is not None and self._events and self._events[0][0] <= self._end:
            when, _, action, task = heapq.heappop(self._events)
            self.now = max(self.now, when)
            if task is None:
                assert action is not None
                if me is None:
                    action()
                    continue
                try:
                    action()
                except BaseException as exc:  # the simulator's own crash: its caller's
                    self._error = exc
                    return None
            elif not task.done:
                if task.killed and not task._running:
                    task.done = True  # killed before its body ran: it never starts
                    continue
                return task
        return None

    def _hand(self, task: Task | None) -> None:
        """Give the baton to `task`, starting it on an idle thread or a new one; None: to
        the caller of `run_until`."""
        if task is None:
            self._back.release()
            return
        self.current = task
        if task._running:
            task._turn.release()
            return
        task._running = True
        if self._idle:
            worker = self._idle.pop()
            worker.task = task
            worker.wake.release()
        else:
            _thread.start_new_thread(self._serve, (_Worker(task),))

    def _serve(self, worker: _Worker) -> None:
        """A thread's life: tasks one after another, idle in between, until `drain` ends it."""
        while (task := worker.task) is not None:
            while True:  # this task, then each never-started one it hands the baton to
                contextvars.Context().run(self._run, task)
                following = self._next(task)
                if following is None or following._running:
                    break
                following._running = True
                self.current = task = following
            worker.task = None
            self._idle.append(worker)  # while holding the baton, before handing it on
            self._hand(following)
            worker.wake.acquire()

    def _run(self, task: Task) -> None:
        try:
            if not task.killed:
                task._body(task)
        except Killed:
            pass
        except BaseException as exc:  # a crash of the real code: the oracle reports it
            self.crashes.append(f"{task.name}: {type(exc).__name__}: {exc}")
        finally:
            task.done = True

    def _raise_crash(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error


class LoopRenewals:
    """`ledger.lease.Renewals` on the fake clock: each renewal runs as its owner's instance.

    A renewal of a killed task is dropped (a dead instance renews nothing); one
    that a fault kills kills its owner. Delays are rounded to a tenth of a second.
    The keeper subtracts its renewal's duration on the ledger's clock, the loop's
    here: the real clock, which a loaded machine stalls, must not decide the order
    of simulated events.
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
