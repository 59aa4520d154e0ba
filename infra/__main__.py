"""Pulumi program: the stack's schedule, as `dedup_schedule.program.deploy` builds it.

All the code lives in the `dedup_schedule` package, which a team's copy installs at
its pinned version; this file only says where the program is.
"""

from pathlib import Path

from dedup_schedule.program import deploy

deploy(Path(__file__).parent)
