"""The handler's per-request lines: runs by outcome, attempts, latency, and their alerts.

Every delivery the handler answers writes one line with its `outcome`, `job`,
`attempts` and `duration_ms` (`runledger.app`). The outcome counter carries the
alerts on runs that failed for good and on a ledger the handler cannot use.
"""

from __future__ import annotations

import pulumi_gcp as gcp

from dedup_schedule.monitoring_build import (
    MonitoringScope,
    WatchedMetric,
    counter,
    distribution,
    label_in,
    threshold_alert,
)
from dedup_schedule.monitoring_findings import findings_condition
from runledger import facts

# Ledger failures must go on this long before they page: one bad delivery is retried.
LEDGER_OUTAGE_S = 300


def run_outcomes(scope: MonitoringScope, findings: gcp.logging.Metric) -> WatchedMetric:
    """The runs counter, with the alerts on failed runs (also the audit's failed
    `findings`) and on a ledger outage."""
    runs = counter(
        scope,
        "runs",
        "Deliveries the handler answered, by outcome and job",
        scope.requests,
        {"outcome": "jsonPayload.outcome", "job": "jsonPayload.job"},
    )
    failed = threshold_alert(
        scope,
        "alert-failed",
        "Scheduled run failed for good",
        "A job raised TerminalJobError: its run is recorded `failed` and not retried. "
        "Look up the run's `error` in the handler's log line (label `job`); fix the cause, "
        "then force a new run if the work is still needed.",
        "ERROR",
        [
            (
                runs,
                "Run failed terminally",
                f'metric.label.outcome="{facts.OUTCOME_FAILED_TERMINAL}"',
            ),
        ],
        extra=findings_condition(findings, "Audit found a failed run", (facts.OUTCOME_RUN_FAILED,)),
    )
    ledger = threshold_alert(
        scope,
        "alert-ledger",
        "Run ledger unavailable",
        "The handler could not read or write its Firestore ledger for several minutes "
        "(outcome store_unavailable, store_permission_denied or store_unusable), so no "
        "run can be claimed. Check Firestore's status, the runtime account's grant on "
        "the ledger database, and the database itself.",
        "CRITICAL",
        [
            (
                runs,
                "Ledger errors in every 5 minutes",
                label_in("outcome", facts.LEDGER_UNAVAILABLE_OUTCOMES),
            )
        ],
        window_s=LEDGER_OUTAGE_S,
        group_by=(),
    )
    return WatchedMetric(runs, (failed, ledger))


def attempts(scope: MonitoringScope) -> gcp.logging.Metric:
    """Attempts per claimed run, per job: how often Scheduler had to retry."""
    return distribution(
        scope,
        "attempts",
        "Attempts of each run claimed by a delivery, per job",
        f"{scope.requests} AND jsonPayload.attempts>=1",
        "jsonPayload.attempts",
        "1",
        # 1..8 attempts, one bucket each (Scheduler retries at most 5 times).
        gcp.logging.MetricBucketOptionsArgs(
            linear_buckets=gcp.logging.MetricBucketOptionsLinearBucketsArgs(
                num_finite_buckets=8, offset=1, width=1
            )
        ),
    )


def latency(scope: MonitoringScope) -> gcp.logging.Metric:
    """The handler's answer time per delivery, per job."""
    return distribution(
        scope,
        "latency",
        "Time the handler took to answer a delivery, per job",
        scope.requests,
        "jsonPayload.duration_ms",
        "ms",
        # 10 ms up to about 87 minutes, doubling: past the longest request timeout.
        gcp.logging.MetricBucketOptionsArgs(
            exponential_buckets=gcp.logging.MetricBucketOptionsExponentialBucketsArgs(
                num_finite_buckets=20, growth_factor=2, scale=10
            )
        ),
    )
