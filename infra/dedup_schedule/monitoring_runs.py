"""The handler's per-request lines: runs by outcome, attempts, latency, and their alerts.

Every delivery the handler answers writes one line with its `outcome`, `job`,
`attempts` and `duration_ms` (`runledger.delivery.app`). The outcome counter carries the
alerts on runs that failed for good and on a ledger the handler cannot use.
"""

from __future__ import annotations

import pulumi_gcp as gcp

from dedup_schedule.config import ScheduleConfig
from dedup_schedule.config_audit import longest_interval_s
from dedup_schedule.monitoring_build import (
    MonitoringScope,
    counter,
    distribution,
    label_in,
    threshold_alert,
)
from dedup_schedule.monitoring_findings import findings_condition
from runledger import facts

# The ledger alert's window: at least this long, and at most the longest alignment
# period an alerting policy's condition takes (90,000 s, API `Aggregation.alignmentPeriod`).
LEDGER_WINDOW_MIN_S = 1800
LEDGER_WINDOW_MAX_S = 90_000
# A ledger outage pages once the handler logs more ledger errors than this in the window.
LEDGER_ERRORS_TOLERATED = 1


def ledger_window_s(config: ScheduleConfig) -> int:
    """The window the ledger alert counts errors in: two audit intervals, so the audit's own
    deliveries alone give it two errors in an outage; at least `LEDGER_WINDOW_MIN_S`.

    A Firestore outage fails every delivery while it lasts, one ledger-error line each,
    at whatever pace deliveries come; it is not a continuous signal, so a condition that
    needs errors in every minute (or every 5 minutes) of a window may never be met by a
    nightly job whose retries are minutes apart. A lone transient error, in contrast, is
    retried and heals. So the condition pages on a second ledger error within the window.
    For the example stack (Pulumi.example.yaml): the audit runs every 15 minutes, so a
    30-minute window holds two audit deliveries; hourly-sync's first attempt and its 5
    retries (10 s backoff, doubling) fail within about 5 minutes of :05;
    nightly-report's 4 attempts (60 s backoff, doubling twice) within about 7 minutes
    of 02:30 Berlin; invoice-export's single weekday attempt adds one more. An outage
    of a few minutes around one of those runs pages, and any longer one pages within
    about 30 minutes from the audit's own deliveries.
    """
    audit_interval = longest_interval_s(config.audit.schedule) if config.audit.enabled else 0
    window = max(LEDGER_WINDOW_MIN_S, 2 * audit_interval)
    return min(-(-window // 60) * 60, LEDGER_WINDOW_MAX_S)


def run_outcomes(scope: MonitoringScope) -> gcp.logging.Metric:
    """The runs counter, by outcome and job."""
    return counter(
        scope,
        "runs",
        "Deliveries the handler answered, by outcome and job",
        scope.requests,
        {"outcome": "jsonPayload.outcome", "job": "jsonPayload.job"},
    )


def run_alerts(
    scope: MonitoringScope, runs: gcp.logging.Metric, findings: gcp.logging.Metric
) -> tuple[gcp.monitoring.AlertPolicy, ...]:
    """The alerts on failed runs (the handler's, and the audit's failed `findings`) and on
    a ledger outage."""
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
    window = ledger_window_s(scope.config)
    ledger = threshold_alert(
        scope,
        "alert-ledger",
        "Run ledger unavailable",
        f"The handler failed to read or write its Firestore ledger more than "
        f"{LEDGER_ERRORS_TOLERATED} time(s) within {window // 60} minutes (outcome "
        "store_unavailable, store_permission_denied or store_unusable), so runs cannot be "
        "claimed. Check Firestore's status, the runtime account's grant on the ledger "
        "database, and the database itself.",
        "CRITICAL",
        [
            (
                runs,
                f"More than {LEDGER_ERRORS_TOLERATED} ledger error(s) in {window // 60} minutes",
                label_in("outcome", facts.LEDGER_UNAVAILABLE_OUTCOMES),
            )
        ],
        window_s=window,
        group_by=(),
        more_than=LEDGER_ERRORS_TOLERATED,
    )
    return failed, ledger


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
        # 10 ms doubling 20 times: the top finite bound is 10 ms * 2^20, about 175
        # minutes, past the longest request timeout (60 minutes).
        gcp.logging.MetricBucketOptionsArgs(
            exponential_buckets=gcp.logging.MetricBucketOptionsExponentialBucketsArgs(
                num_finite_buckets=20, growth_factor=2, scale=10
            )
        ),
    )
