"""The audit's findings: a counter by kind and job, and the alert on missed runs.

The audit logs one line per scheduled run it finds missed, stale, failed or
released, and one per job it could not judge (drifted, unauditable;
`runledger.audit.runner`). Missed, stale and released runs and unjudged jobs page here;
failed ones page with the handler's terminal failures (`monitoring_runs`),
through `findings_condition`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi_gcp as gcp

from dedup_schedule.monitoring_build import (
    MonitoringScope,
    condition,
    counter,
    label_in,
    one_of,
    threshold_alert,
)
from runledger import facts


def findings(scope: MonitoringScope) -> gcp.logging.Metric:
    """The findings counter, by kind and job."""
    kinds = (*facts.MISSED_RUN_OUTCOMES, facts.OUTCOME_RUN_FAILED, *facts.JOB_FINDING_OUTCOMES)
    return counter(
        scope,
        "findings",
        "Scheduled runs the audit found missed, stale, failed or released, by kind and job",
        f"{scope.lines} AND jsonPayload.outcome={one_of(kinds)}",
        {"kind": "jsonPayload.outcome", "job": "jsonPayload.job"},
    )


def missed_alert(scope: MonitoringScope, metric: gcp.logging.Metric) -> gcp.monitoring.AlertPolicy:
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
            metric,
            "Audit found a missed, stale or released run, or a job it could not judge",
            (*facts.MISSED_RUN_OUTCOMES, *facts.JOB_FINDING_OUTCOMES),
        ),
    )


def findings_condition(
    metric: gcp.logging.Metric, title: str, kinds: Sequence[str]
) -> gcp.monitoring.AlertPolicyConditionArgs:
    """Any finding of the given kinds, per job."""
    return condition(metric, title, label_in("kind", kinds), 60, ("metric.label.job",))
