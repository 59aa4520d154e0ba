"""`RunMonitoring`: log-based metrics from the handler's log lines, alerts on them, a dashboard.

The handler writes one JSON line per request (`runledger.app`: `outcome`, `status`,
`job`, `attempts`, `duration_ms`, ...) and the audit one per finding plus one
summary (`runledger.audit`). Cloud Logging parses them into `jsonPayload`; Cloud
Run functions (2nd gen) log under the monitored resource `cloud_run_revision`,
with the function's Cloud Run service in `resource.labels.service_name`.

Log-based metrics ("Log-based metrics overview", Cloud Logging) count the
entries that match a filter, with labels extracted from fields
(`EXTRACT(jsonPayload.job)`), or record a value per entry as a distribution
(`value_extractor`). Each signal's module builds its metric together with the
alert policies that watch it: `monitoring_runs` (run outcomes, attempts, latency;
failed runs, ledger outage), `monitoring_findings` (the audit's findings; missed
runs), `monitoring_audit` (the audit's heartbeat; audit stopped), on the shared
builders of `monitoring_build`; `monitoring_dashboard` charts them. The outcome
names come from `runledger.facts`, which the policy pack shares, and tests check
them against the lines the handler really writes.

A first `pulumi up` may fail to create an alert policy with 404 "Cannot find
metric(s) ... If a metric was created recently, it could take up to 10 minutes
to become available" (hashicorp/terraform-provider-google#11102); run it again
after a few minutes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from dedup_schedule.config import ScheduleConfig
from dedup_schedule.monitoring_audit import audit_heartbeat
from dedup_schedule.monitoring_build import MonitoringScope, handler_lines, notification_channels
from dedup_schedule.monitoring_dashboard import dashboard
from dedup_schedule.monitoring_findings import findings
from dedup_schedule.monitoring_runs import attempts, latency, run_outcomes
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
        # Findings first: the alert on failed runs also watches the audit's failed findings.
        found = findings(scope)
        runs = run_outcomes(scope, found.metric)
        distributions = [attempts(scope), latency(scope)]
        audits = audit_heartbeat(scope) if args.config.audit.enabled else None
        watched = [found, runs, *([audits] if audits else [])]
        self.alert_policies = [policy for signal in watched for policy in signal.alerts]
        self.notification_channels = pulumi.Output.all(*channels)
        self.dashboard = dashboard(
            scope,
            [runs.metric, found.metric, *distributions, *([audits.metric] if audits else [])],
        )
        self.register_outputs(
            {
                "alertPolicies": [policy.name for policy in self.alert_policies],
                "notificationChannels": self.notification_channels,
                "dashboard": self.dashboard.id,
            }
        )
