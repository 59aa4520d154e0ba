"""Close the asyncio event loops the Pulumi SDKs leave open, before the interpreter exits.

`pulumi.runtime.sync_await._ensure_event_loop` creates and installs a loop it
never closes, and `pulumi_policy`'s analyzer servicer creates one per awaitable
policy and closes it only when the policy returns normally (pulumi_policy/policy.py,
`Analyze`: `loop.close()` is skipped when `validate` raises, as it does on an
unknown value during a preview). An unclosed selector loop closes itself in
`BaseEventLoop.__del__`; at interpreter shutdown its self-pipe socket may already
have been finalized, and the close then fails with "Exception ignored in
BaseEventLoop.__del__ ... ValueError: Invalid file descriptor: -1" after a correct
verdict. Python's asyncio documentation asks for `loop.close()` on every loop
that is no longer needed; the offline tools do that here, once their work is done.
"""

from __future__ import annotations

import asyncio
import gc


def open_loops() -> list[asyncio.AbstractEventLoop]:
    return [
        obj
        for obj in gc.get_objects()
        if isinstance(obj, asyncio.BaseEventLoop) and not obj.is_closed()
    ]


def close_leftover_loops() -> None:
    """Close every event loop of this process that is open and not running."""
    for loop in open_loops():
        if not loop.is_running():
            loop.close()
    # A fresh default policy: no closed loop stays installed as the thread's current one,
    # and a later run in this process (the tests') gets a new loop as a first run does.
    asyncio.set_event_loop_policy(None)
