"""The alert policies on `RunMonitoring`'s metrics: what pages, and what it tells on-call.

- "Scheduled run failed for good": the handler's terminal failures (runs counter) and
  the audit's failed findings.
- "Run ledger unavailable": the handler's ledger errors (runs counter).
- "Scheduled run missed": the audit's missed, stale and released runs and the jobs it
  could not judge (findings counter).
- "Run audit stopped" (with the audit on): no audit summary line (audits counter).
- "Job suspended" (with a job's `suspendAfterFailures`): the audit's one `job_suspended`
  finding per suspension (findings counter).
- "Run started late" (with `alerts.startLagSeconds`): a run claimed later than that
  after its schedule time (late-starts counter).
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi_gcp as gcp

from dedup_schedule.config.model import ScheduleConfig
from dedup_schedule.monitoring.builders import (
    MonitoringScope,
    condition,
    label_in,
    metric_filter,
    policy,
    threshold_alert,
)
from dedup_schedule.monitoring.metrics import MonitoredMetrics
from runledger import facts

# The ledger alert's window: at least this long, and at most the longest alignment
# period an alerting policy's condition takes (90,000 s, API `Aggregation.alignmentPeriod`).
LEDGER_WINDOW_MIN_S = 1800
LEDGER_WINDOW_MAX_S = 90_000
# A ledger outage pages once the handler logs more ledger errors than this in the window.
LEDGER_ERRORS_TOLERATED = 1


def create_alert_policies(
    scope: MonitoringScope, metrics: MonitoredMetrics
) -> list[gcp.monitoring.AlertPolicy]:
    """Every alert policy, each after `scope.metrics_ready`."""
    return [
        failed_alert(scope, metrics.runs, metrics.findings),
        ledger_alert(scope, metrics.runs),
        missed_alert(scope, metrics.findings),
        *([audit_stopped_alert(scope, metrics.audits)] if metrics.audits else []),
        *([start_lag_alert(scope, metrics.late_starts)] if metrics.late_starts else []),
        *([suspended_alert(scope, metrics.findings)] if _suspending(scope) else []),
    ]


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
    of 03:30 Berlin; invoice-export's single weekday attempt adds one more. An outage
    of a few minutes around one of those runs pages, and any longer one pages within
    about 30 minutes from the audit's own deliveries.
    """
    audit_interval = config.audit_interval_s if config.audit.enabled else 0
    window = max(LEDGER_WINDOW_MIN_S, 2 * audit_interval)
    return min(-(-window // 60) * 60, LEDGER_WINDOW_MAX_S)


def findings_condition(
    metric: gcp.logging.Metric, title: str, kinds: Sequence[str]
) -> gcp.monitoring.AlertPolicyConditionArgs:
    """Any finding of the given kinds, per job."""
    return condition(metric, title, label_in("kind", kinds), 60, ("metric.label.job",))


def failed_alert(
    scope: MonitoringScope, runs: gcp.logging.Metric, findings: gcp.logging.Metric
) -> gcp.monitoring.AlertPolicy:
    """Runs that failed for good: the handler's, and the audit's failed `findings`."""
    return threshold_alert(
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


def ledger_alert(scope: MonitoringScope, runs: gcp.logging.Metric) -> gcp.monitoring.AlertPolicy:
    """A ledger the handler cannot read or write, from its ledger-error outcomes."""
    window = ledger_window_s(scope.config)
    return threshold_alert(
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


def missed_alert(
    scope: MonitoringScope, findings: gcp.logging.Metric
) -> gcp.monitoring.AlertPolicy:
    """The "Scheduled run missed" alert on the findings counter."""
    return threshold_alert(
        scope,
        "alert-missed",
        "Scheduled run missed",
        "The audit found a scheduled run that never finished: no record (missed), a "
        "lease that ran out (stale), or a retryable failure after Scheduler's last retry "
        "(released); or a job it could not judge: its live schedule differs from the "
        "deployed one (drifted) or its times cannot be listed (unauditable). Check the "
        "Scheduler job (edited? failing attempts?) and the handler's deploys; with catchUp "
        "on, the audit runs a missed run itself (see the finding's catch_up).",
        "ERROR",
        [],
        extra=findings_condition(
            findings,
            "Audit found a missed, stale or released run, or a job it could not judge",
            (*facts.MISSED_RUN_OUTCOMES, *facts.JOB_FINDING_OUTCOMES),
        ),
    )


def audit_stopped_alert(
    scope: MonitoringScope, audits: gcp.logging.Metric
) -> gcp.monitoring.AlertPolicy:
    """The "Run audit stopped" alert on the absence of the audits counter.

    An audit that stops running reports nothing, so its findings alert stays silent;
    only the absence of its summary line shows it.
    """
    # Cloud Monitoring "Create metric-absence alerting policies": the condition is met
    # when a time series has no data for the trigger absence time (at most 23.5 h),
    # and only once the metric has written a point after the policy was created. So
    # it watches an audit that ran at least once and then stopped.
    absent = scope.config.audit_absence_s
    job = scope.config.audit_job_id
    return policy(
        scope,
        "alert-audit-stopped",
        "Run audit stopped",
        f"No audit finished in {absent // 60} minutes, so missed runs go unnoticed. Check "
        f"the Scheduler job {job} (paused? failing?) and the handler's log lines "
        f"for job {job}.",
        "WARNING",
        [
            gcp.monitoring.AlertPolicyConditionArgs(
                display_name="No audit summary line",
                condition_absent=gcp.monitoring.AlertPolicyConditionConditionAbsentArgs(
                    filter=metric_filter(audits),
                    duration=f"{absent}s",
                    aggregations=[
                        gcp.monitoring.AlertPolicyConditionConditionAbsentAggregationArgs(
                            alignment_period="300s",
                            per_series_aligner="ALIGN_SUM",
                            cross_series_reducer="REDUCE_SUM",
                        )
                    ],
                ),
            )
        ],
        # An absence incident closes when the summary line comes back; closing it on a
        # timer while the audit is still stopped would only hide that it is.
        auto_close=None,
    )


def start_lag_alert(
    scope: MonitoringScope, late_starts: gcp.logging.Metric
) -> gcp.monitoring.AlertPolicy:
    """The "Run started late" alert: any run claimed past `alerts.startLagSeconds`, per job."""
    threshold = scope.config.alerts.start_lag_s
    return threshold_alert(
        scope,
        "alert-start-lag",
        "Run started late",
        f"A scheduled run was claimed more than {threshold} s after its schedule time "
        "(`start_lag_s` on the handler's log line, label `job`): Cloud Scheduler delivered "
        "it late, or only a retry got through. Check the Scheduler job's attempts, the "
        "handler's cold starts and instance limit, and the start-lag chart.",
        "WARNING",
        [(late_starts, f"Run claimed more than {threshold} s late", "")],
    )


def _suspending(scope: MonitoringScope) -> bool:
    return any(job.suspend_after_failures is not None for job in scope.config.jobs)


def suspended_alert(
    scope: MonitoringScope, findings: gcp.logging.Metric
) -> gcp.monitoring.AlertPolicy:
    """The "Job suspended" alert: the audit's finding when a job's suspension begins.

    The audit logs that finding once per suspension (`runledger.ledger.suspension`), so
    this pages once, not for every time the suspended job does not run.
    """
    return threshold_alert(
        scope,
        "alert-suspended",
        "Job suspended",
        "A job was suspended in the ledger: after suspendAfterFailures scheduled runs in a "
        "row failed for good, or by an operator (`ops suspend`). Its deliveries are answered "
        "`suspended` and not run until `ops resume`. The finding's `detail` says by whom, "
        "since when and why; `ops describe --job` shows the same.",
        "ERROR",
        [],
        extra=findings_condition(
            findings, "Audit found a job suspended", (facts.OUTCOME_JOB_SUSPENDED,)
        ),
    )
