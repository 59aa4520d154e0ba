"""Your jobs, keyed by Cloud Scheduler job id (the ids of your Pulumi.<stack>.yaml).

Each function runs at most once per scheduled run. Raise TerminalJobError for a
failure a retry cannot fix; any other exception releases the run, so Cloud
Scheduler's retry delivers it again. Pass `ctx.run_id` to downstream systems as
an idempotency token.
"""

from __future__ import annotations

import logging

from runledger import Jobs, RunContext

JOBS = Jobs()
log = logging.getLogger(__name__)


@JOBS.job("nightly-report")
def nightly_report(ctx: RunContext) -> None:
    log.info("building the report for %s (run %s)", ctx.schedule_time.date(), ctx.run_id)
