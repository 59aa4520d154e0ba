"""The audit's heartbeat: a counter of finished audits and the alert on its absence.

An audit that stops running reports nothing, so its findings alert stays silent;
only the absence of its summary line (`runledger.audit.runner`) shows it.
"""

from __future__ import annotations

import pulumi_gcp as gcp

from dedup_schedule.config_audit import audit_absence_s
from dedup_schedule.monitoring_build import (
    MonitoringScope,
    counter,
    metric_filter,
    policy,
)
from runledger import facts


def audit_heartbeat(scope: MonitoringScope) -> gcp.logging.Metric:
    """The audits counter: one per audit that ran to the end."""
    return counter(
        scope,
        "audits",
        "Audits that ran to the end (their summary line)",
        f'{scope.lines} AND jsonPayload.outcome="{facts.OUTCOME_AUDIT_SUMMARY}"',
        {},
    )


def audit_stopped_alert(
    scope: MonitoringScope, audits: gcp.logging.Metric
) -> gcp.monitoring.AlertPolicy:
    """The "Run audit stopped" alert on the absence of the audits counter."""
    # Cloud Monitoring "Create metric-absence alerting policies": the condition is met
    # when a time series has no data for the trigger absence time (at most 23.5 h),
    # and only once the metric has written a point after the policy was created. So
    # it watches an audit that ran at least once and then stopped.
    absent = audit_absence_s(scope.config)
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
