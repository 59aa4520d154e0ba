"""Header names Cloud Scheduler keeps for Google are refused before a deploy.

target.proto reserves names beginning `X-Google-` and `X-AppEngine-`; the provider's
check is case-sensitive, so a lower-case name would pass it and every delivery would
arrive without the header. `make plan` refuses both prefixes in any case, in one line
naming the key.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.clitools import run_module


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("projectHeader", "x-google-project"),
        ("regionHeader", "X-APPENGINE-REGION"),
        ("projectHeader", "X-Google-Project"),
    ],
)
def test_make_plan_refuses_a_reserved_header_name_in_one_line(
    make_stack: Callable[[dict[str, Any]], Path],
    multi_job_config: dict[str, Any],
    key: str,
    value: str,
) -> None:
    project = make_stack({**multi_job_config, f"scheduler-dedup:{key}": value})

    result = run_module(
        "scheduler_dedup.offline.plan", "--dir", str(project), "--stack", "test", timeout_s=120
    )

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: scheduler-dedup:{key}: {value!r} begins with ")
    assert "reserves for Google" in result.stderr


def test_a_header_that_only_contains_google_is_accepted(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    project = make_stack(
        {**multi_job_config, "scheduler-dedup:projectHeader": "X-My-Google-Project"}
    )

    result = run_module(
        "scheduler_dedup.offline.plan", "--dir", str(project), "--stack", "test", timeout_s=120
    )

    assert result.returncode == 0, result.stderr
    assert "X-My-Google-Project" in result.stdout
