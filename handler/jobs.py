"""Example jobs: replace these with your own, keyed by Cloud Scheduler job id.

Each function runs at most once per scheduled run. Raise TerminalJobError for
failures a retry cannot fix; any other exception releases the run so Cloud
Scheduler's retry delivers it again. Pass `ctx.run_id` to downstream systems as
an idempotency token.
"""

from __future__ import annotations

import json
import logging

from runledger import Jobs, RunContext, TerminalJobError

JOBS = Jobs()
log = logging.getLogger(__name__)


@JOBS.job("nightly-report")
def nightly_report(ctx: RunContext) -> None:
    log.info("building the report for %s (run %s)", ctx.schedule_time.date(), ctx.run_id)


@JOBS.job("hourly-sync")
def hourly_sync(ctx: RunContext) -> None:
    ctx.ensure_lease()
    log.info("syncing changes up to %s", ctx.schedule_time.isoformat())


@JOBS.job("invoice-export")
def invoice_export(ctx: RunContext) -> None:
    try:
        payload = json.loads(ctx.body or b"{}")
    except ValueError as exc:
        raise TerminalJobError(f"job body is not JSON: {exc}") from exc
    log.info("exporting invoices for %s", payload.get("ledger", "all ledgers"))
