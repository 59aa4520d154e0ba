"""The machinery tests' own JOBS module, so they never depend on the example jobs.

`handler/jobs.py` is the user's to replace; tests of the handler itself load
this module instead (DEDUP_JOBS_MODULE=tests.handler.machinery_jobs), and
stay green whatever jobs a team puts there.
"""

from __future__ import annotations

import logging

from runledger import Jobs, RunContext

JOBS = Jobs()
log = logging.getLogger(__name__)
MODULE = __name__


@JOBS.job("machinery-once")
def machinery_once(ctx: RunContext) -> None:
    """Does nothing: the tests count what the ledger records, not what the job does."""


@JOBS.job("machinery-logs")
def machinery_logs(ctx: RunContext) -> None:
    log.info("machinery job at %s", ctx.schedule_time.isoformat())
