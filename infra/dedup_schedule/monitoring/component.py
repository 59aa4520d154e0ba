"""`RunMonitoring`: log-based metrics from the handler's log lines, alerts on them, a dashboard.

The handler writes one JSON line per request (`runledger.service.app`: `outcome`, `status`,
`job`, `attempts`, `duration_ms`, ...) and the audit one per finding plus one
summary (`runledger.audit.runner`). Cloud Logging parses them into `jsonPayload`; Cloud
Run functions (2nd gen) log under the monitored resource `cloud_run_revision`,
with the function's Cloud Run service in `resource.labels.service_name`.

Log-based metrics ("Log-based metrics overview", Cloud Logging) count the
entries that match a filter, with labels extracted from fields
(`EXTRACT(jsonPayload.job)`), or record a value per entry as a distribution
(`value_extractor`). `monitoring.metrics` builds the five metrics,
`monitoring.alerts` the alert policies that watch them, `monitoring.channels` the
channels those notify and `monitoring.dashboard` the charts, all on the builders
of `monitoring.builders`. The outcome names come from `runledger.facts`, which the
policy pack shares, and tests check them against the lines the handler really writes.

Cloud Monitoring refuses an alert policy whose filter names a log-based metric it
does not know yet (404 "Cannot find metric(s)", hashicorp/terraform-provider-google#11102),
and a new metric may take up to 10 minutes to become known. So every metric is
created first, then one create-only wait (`builders.wait_for_metrics`), then
the alert policies, all after that wait.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from dedup_schedule.config.model import ScheduleConfig
from dedup_schedule.monitoring.alerts import create_alert_policies
from dedup_schedule.monitoring.builders import MonitoringScope, handler_lines, wait_for_metrics
from dedup_schedule.monitoring.channels import notification_channels
from dedup_schedule.monitoring.dashboard import dashboard
from dedup_schedule.monitoring.metrics import create_metrics
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
        metrics = create_metrics(scope)
        ready = wait_for_metrics(scope, metrics.all())
        self.alert_policies = create_alert_policies(
            dataclasses.replace(scope, metrics_ready=ready), metrics
        )
        self.notification_channels = pulumi.Output.all(*channels)
        self.dashboard = dashboard(scope, metrics)
        self.register_outputs(
            {
                "alertPolicies": [policy.name for policy in self.alert_policies],
                "notificationChannels": self.notification_channels,
                "dashboard": self.dashboard.id,
            }
        )
