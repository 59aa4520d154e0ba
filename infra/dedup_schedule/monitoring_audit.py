"""The audit's heartbeat: a counter of finished audits and the alert on its absence.

An audit that stops running reports nothing, so its findings alert stays silent;
only the absence of its summary line (`runledger.audit`) shows it.
"""

from __future__ import annotations

import pulumi_gcp as gcp

from dedup_schedule.config_audit import audit_absence_s
from dedup_schedule.monitoring_build import (
    MonitoringScope,
    WatchedMetric,
    counter,
    metric_filter,
    policy,
)
from runledger import facts


def audit_heartbeat(scope: MonitoringScope) -> WatchedMetric:
    """The audits counter and the "Run audit stopped" alert on its absence."""
    audits = counter(
        scope,
        "audits",
        "Audits that ran to the end (their summary line)",
        f'{scope.lines} AND jsonPayload.outcome="{facts.OUTCOME_AUDIT_SUMMARY}"',
        {},
    )
    # Cloud Monitoring "Create metric-absence alerting policies": the condition is met
    # when a time series has no data for the trigger absence time (at most 23.5 h),
    # and only once the metric has written a point after the policy was created. So
    # it watches an audit that ran at least once and then stopped.
    absent = audit_absence_s(scope.config)
    stopped = policy(
        scope,
        "alert-audit-stopped",
        "Run audit stopped",
        f"No audit finished in {absent // 60} minutes, so missed runs go unnoticed. Check "
        "the Scheduler job runledger-audit (paused? failing?) and the handler's log lines "
        "for job runledger-audit.",
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
    )
    return WatchedMetric(audits, (stopped,))
