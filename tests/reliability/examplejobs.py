"""Jobs for the example stack's own reliability test, served by the real handler process.

The handler refuses to start unless every job in DEDUP_SCHEDULES is defined, so
this module defines each job the stack's DEDUP_SCHEDULES names (whatever they are)
as the same probe: it records its begin and end in REL_FAULT_DIR, as
`faultjobs.crash_probe` does, and can pause in between (REL_PAUSE_AT=during) for
the test to kill the process there.
"""

from __future__ import annotations

import json
import os

from runledger import Jobs, RunContext
from runledger.schedules import VARIABLE
from tests.reliability.faultjobs import pause_if, record

JOBS = Jobs()


def probe(ctx: RunContext) -> None:
    record(f"begin {ctx.run_id} {ctx.attempt_id}")
    pause_if("during")
    record(f"end {ctx.run_id} {ctx.attempt_id}")


for _entry in json.loads(os.environ.get(VARIABLE, "[]")):
    JOBS.job(_entry["id"])(probe)
