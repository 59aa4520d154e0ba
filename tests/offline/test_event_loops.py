"""The offline tools leave no asyncio loop open, so nothing is printed at interpreter exit.

An unclosed loop closes itself in `BaseEventLoop.__del__`, which at shutdown can
fail with "Exception ignored ... Invalid file descriptor: -1" after the verdict.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler_dedup.offline import plan, policy_check
from scheduler_dedup.offline.event_loops import open_loops

PROGRAMS = Path(__file__).resolve().parent / "programs"


@pytest.mark.parametrize(
    ("tool", "extra"),
    [(policy_check.main, ["--preview"]), (policy_check.main, []), (plan.main, [])],
)
def test_a_run_leaves_no_event_loop_open(tool, extra: list[str], capsys) -> None:
    status = tool(["--dir", str(PROGRAMS / "public_v1"), "--stack", "dev", *extra])
    assert status in (0, 1), capsys.readouterr()
    assert open_loops() == []
