"""The fake clock's loop: tasks take turns in time order, whichever thread runs the loop.

A task going to sleep runs the due events itself and hands the baton on
(`simulation.clock`); these hold that to what one loop thread would do: the
same order, crashes reported where they were, every thread ended at drain.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

import pytest

from scheduler_dedup.localrun.simulation.clock import Loop, Task

T0 = datetime(2026, 10, 16, tzinfo=UTC)
NO_SKEW = timedelta(0)


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


def test_tasks_actions_and_spawns_interleave_in_time_order():
    loop = Loop(T0)
    seen: list[tuple[float, str]] = []

    def note(text: str) -> None:
        seen.append(((loop.now - T0).total_seconds(), text))

    def worker(name: str, naps: list[float]) -> None:
        def body(task: Task) -> None:
            note(f"{name} starts")
            for nap in naps:
                loop.sleep(seconds(nap))
                note(f"{name} wakes")
            if name == "a":  # a task started by a task, and an action set by one
                loop.spawn("c", NO_SKEW, worker("c", [1]))
                loop.after(seconds(0.5), lambda: note("a's action"))

        return body

    loop.spawn("a", NO_SKEW, worker("a", [2, 2]))
    loop.spawn("b", NO_SKEW, worker("b", [1, 1, 1, 1]))
    loop.at(T0 + seconds(3), lambda: note("action"))
    loop.run_until(T0 + seconds(10))
    assert seen == [
        (0, "a starts"),
        (0, "b starts"),
        (1, "b wakes"),
        (2, "a wakes"),
        (2, "b wakes"),
        (3, "action"),  # set before b's wake-up for 3 s was: it comes first
        (3, "b wakes"),
        (4, "a wakes"),
        (4, "b wakes"),
        (4, "c starts"),
        (4.5, "a's action"),
        (5, "c wakes"),
    ]
    assert loop.now == T0 + seconds(10)


def test_run_until_stops_at_its_end_and_the_next_call_goes_on():
    loop = Loop(T0)
    woke: list[datetime] = []

    def body(task: Task) -> None:
        for _ in range(3):
            loop.sleep(seconds(5))
            woke.append(loop.now)

    loop.spawn("t", NO_SKEW, body)
    loop.run_until(T0 + seconds(7))
    assert woke == [T0 + seconds(5)]
    loop.run_until(T0 + seconds(20))
    assert woke == [T0 + seconds(5), T0 + seconds(10), T0 + seconds(15)]


def test_each_task_reads_the_clock_with_its_own_skew_and_actions_with_none():
    loop = Loop(T0)
    read: dict[str, datetime] = {}

    def body(task: Task) -> None:
        loop.sleep(seconds(1))
        read[task.name] = loop.clock()

    loop.spawn("ahead", seconds(0.5), body)
    loop.spawn("behind", seconds(-0.5), body)
    loop.at(T0 + seconds(1), lambda: read.setdefault("loop", loop.clock()))
    loop.run_until(T0 + seconds(2))
    assert read == {
        "ahead": T0 + seconds(1.5),
        "behind": T0 + seconds(0.5),
        "loop": T0 + seconds(1),
    }


def test_a_crash_of_a_task_is_reported_and_the_others_go_on():
    loop = Loop(T0)
    done: list[str] = []

    def crashes(task: Task) -> None:
        loop.sleep(seconds(1))
        raise ValueError("broken")

    def works(task: Task) -> None:
        loop.sleep(seconds(2))
        done.append(task.name)

    loop.spawn("bad", NO_SKEW, crashes)
    loop.spawn("good", NO_SKEW, works)
    loop.run_until(T0 + seconds(5))
    assert loop.crashes == ["bad: ValueError: broken"]
    assert done == ["good"]


def test_a_crash_of_an_action_run_by_a_sleeping_task_raises_from_run_until():
    loop = Loop(T0)

    def body(task: Task) -> None:
        loop.sleep(seconds(5))

    def broken() -> None:
        raise RuntimeError("the simulator's own bug")

    loop.spawn("t", NO_SKEW, body)
    loop.at(T0 + seconds(1), broken)  # due while the task sleeps: it runs the action
    with pytest.raises(RuntimeError, match="own bug"):
        loop.run_until(T0 + seconds(10))


def test_a_killed_task_never_resumes_and_one_killed_before_it_started_never_runs():
    loop = Loop(T0)
    ran: list[str] = []

    def body(task: Task) -> None:
        ran.append(f"{task.name} starts")
        loop.sleep(seconds(2))
        ran.append(f"{task.name} resumes")

    sleeper = loop.spawn("sleeper", NO_SKEW, body)
    loop.at(T0 + seconds(1), sleeper.kill)
    unborn = loop.spawn("unborn", NO_SKEW, body)
    unborn.kill()
    loop.run_until(T0 + seconds(5))
    assert ran == ["sleeper starts"]
    assert sleeper.done and unborn.done


def test_drain_ends_every_waiting_task_and_its_thread():
    threads = len(os.listdir("/proc/self/task"))
    loop = Loop(T0)
    unwound: list[str] = []

    def body(task: Task) -> None:
        try:
            loop.sleep(seconds(100))
        finally:
            unwound.append(task.name)

    tasks = [loop.spawn(f"t{i}", NO_SKEW, body) for i in range(5)]
    loop.run_until(T0 + seconds(1))
    loop.drain()
    assert sorted(unwound) == [f"t{i}" for i in range(5)]
    assert all(task.done for task in tasks)
    deadline = time.monotonic() + 30  # a thread that handed the baton back is ending
    while len(os.listdir("/proc/self/task")) > threads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(os.listdir("/proc/self/task")) <= threads
