"""`RunMonitoring`: log-based metrics from the handler's log lines, alerts on them, a dashboard.

The handler writes one JSON line per request (`runledger.delivery.app`: `outcome`, `status`,
`job`, `attempts`, `duration_ms`, ...) and the audit one per finding plus one
summary (`runledger.audit.runner`). Cloud Logging parses them into `jsonPayload`; Cloud
Run functions (2nd gen) log under the monitored resource `cloud_run_revision`,
with the function's Cloud Run service in `resource.labels.service_name`.

Log-based metrics ("Log-based metrics overview", Cloud Logging) count the
entries that match a filter, with labels extracted from fields
(`EXTRACT(jsonPayload.job)`), or record a value per entry as a distribution
(`value_extractor`). Each signal's module builds its metric and, separately, the
alert policies that watch it: `monitoring_runs` (run outcomes, attempts, latency;
failed runs, ledger outage), `monitoring_findings` (the audit's findings; missed
runs), `monitoring_audit` (the audit's heartbeat; audit stopped), on the shared
builders of `monitoring_build`; `monitoring_dashboard` charts them. The outcome
names come from `runledger.facts`, which the policy pack shares, and tests check
them against the lines the handler really writes.

Cloud Monitoring refuses an alert policy whose filter names a log-based metric it
does not know yet (404 "Cannot find metric(s)", hashicorp/terraform-provider-google#11102),
and a new metric may take up to 10 minutes to become known. So every metric is
created first, then one create-only wait (`monitoring_build.wait_for_metrics`), then
the alert policies, all after that wait.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from dedup_schedule.config import ScheduleConfig
from dedup_schedule.monitoring_audit import audit_heartbeat, audit_stopped_alert
from dedup_schedule.monitoring_build import (
    MonitoringScope,
    handler_lines,
    notification_channels,
    wait_for_metrics,
)
from dedup_schedule.monitoring_dashboard import dashboard
from dedup_schedule.monitoring_findings import findings, missed_alert
from dedup_schedule.monitoring_runs import attempts, latency, run_alerts, run_outcomes
from dedup_schedule.placement import Placement


@dataclass(frozen=True)
class RunMonitoringArgs:
    """Inputs of `RunMonitoring`.

    config: the validated stack config (project, jobs, audit and alert channels).
    service_name: the Cloud Run service the handler runs as (`resource.labels.service_name`).
    """

    placement: Placement
    config: ScheduleConfig
    service_name: str


@dataclass(frozen=True)
class MonitoredMetrics:
    """The log-based metrics, each created before any alert policy."""

    runs: gcp.logging.Metric
    findings: gcp.logging.Metric
    attempts: gcp.logging.Metric
    latency: gcp.logging.Metric
    audits: gcp.logging.Metric | None

    def all(self) -> list[gcp.logging.Metric]:
        """Every metric, in the dashboard's order."""
        ordered = [self.runs, self.findings, self.attempts, self.latency, self.audits]
        return [metric for metric in ordered if metric is not None]


class RunMonitoring(pulumi.ComponentResource):
    """What the handler's log lines say about every run, as metrics, alerts and a dashboard."""

    alert_policies: list[gcp.monitoring.AlertPolicy]
    notification_channels: pulumi.Output[list[str]]
    dashboard: gcp.monitoring.Dashboard

    def __init__(
        self, name: str, args: RunMonitoringArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("scheduler-dedup:index:RunMonitoring", name, None, opts)
        unnotified = MonitoringScope(
            args.placement, args.config, self, handler_lines(args.service_name)
        )
        channels = notification_channels(unnotified)
        scope = dataclasses.replace(unnotified, channels=channels)
        metrics = MonitoredMetrics(
            runs=run_outcomes(scope),
            findings=findings(scope),
            attempts=attempts(scope),
            latency=latency(scope),
            audits=audit_heartbeat(scope) if args.config.audit.enabled else None,
        )
        charted = metrics.all()
        alerting = dataclasses.replace(scope, metrics_ready=wait_for_metrics(scope, charted))
        self.alert_policies = [
            *run_alerts(alerting, metrics.runs, metrics.findings),
            missed_alert(alerting, metrics.findings),
            *([audit_stopped_alert(alerting, metrics.audits)] if metrics.audits else []),
        ]
        self.notification_channels = pulumi.Output.all(*channels)
        self.dashboard = dashboard(scope, charted)
        self.register_outputs(
            {
                "alertPolicies": [policy.name for policy in self.alert_policies],
                "notificationChannels": self.notification_channels,
                "dashboard": self.dashboard.id,
            }
        )
