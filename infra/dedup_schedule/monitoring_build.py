"""What every part of `RunMonitoring` builds with: filters, metrics, conditions, policies.

The signal modules (`monitoring_runs`, `monitoring_findings`, `monitoring_audit`) and
the dashboard (`monitoring_dashboard`) each take a `MonitoringScope`, so every
resource they create gets the same project, names, parent, API dependencies and
notification channels without reaching into the component's state.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from dedup_schedule.config import ScheduleConfig
from dedup_schedule.placement import Placement

LOG_METRIC_PREFIX = "logging.googleapis.com/user/"
# The monitored resource of a Cloud Run function's (2nd gen) logs and metrics.
RESOURCE_TYPE = "cloud_run_revision"


@dataclass(frozen=True)
class MonitoringScope:
    """Where `RunMonitoring`'s resources go and what they watch.

    parent: the `RunMonitoring` component, parent of every resource built here.
    lines: the Logging filter matching every entry the handler writes.
    channels: the notification channels every alert policy notifies.
    """

    placement: Placement
    config: ScheduleConfig
    parent: pulumi.Resource
    lines: str
    channels: tuple[pulumi.Input[str], ...] = ()

    @property
    def requests(self) -> str:
        """The handler's per-request lines: the only ones with duration_ms
        (runledger.app.App.handle)."""
        return f"{self.lines} AND jsonPayload.duration_ms>=0"

    def opts(self, depends_on: Sequence[pulumi.Resource] = ()) -> pulumi.ResourceOptions:
        """Options of this component's resources: created after the split by concern, so
        (unlike `Placement.opts`) without an alias to a previous parent."""
        return pulumi.ResourceOptions(
            parent=self.parent, depends_on=[*self.placement.apis, *depends_on]
        )


@dataclass(frozen=True)
class WatchedMetric:
    """A log-based metric and the alert policies that watch it."""

    metric: gcp.logging.Metric
    alerts: tuple[gcp.monitoring.AlertPolicy, ...] = ()


def handler_lines(service_name: str) -> str:
    """Every entry the handler writes: its function's service, nothing else in the project."""
    return f'resource.type="{RESOURCE_TYPE}" AND resource.labels.service_name="{service_name}"'


def one_of(values: Sequence[str]) -> str:
    """A Logging query value list, ("a" OR "b") ("Logging query language")."""
    return "(" + " OR ".join(f'"{value}"' for value in values) + ")"


def label_in(label: str, values: Sequence[str]) -> str:
    """A Monitoring filter on a metric label: metric.label.L=one_of("a","b") (filter syntax)."""
    return f"metric.label.{label}=one_of(" + ",".join(f'"{value}"' for value in values) + ")"


def _labels(*keys: str) -> list[gcp.logging.MetricMetricDescriptorLabelArgs]:
    return [
        gcp.logging.MetricMetricDescriptorLabelArgs(key=key, value_type="STRING") for key in keys
    ]


# --- notification channels --------------------------------------------------------------


def notification_channels(scope: MonitoringScope) -> tuple[pulumi.Input[str], ...]:
    """The configured channel ids, and one e-mail channel per configured address."""
    config, placement = scope.config, scope.placement
    channels: list[pulumi.Input[str]] = list(config.alerts.notification_channels)
    for email in config.alerts.emails:
        channel = gcp.monitoring.NotificationChannel(
            placement.name("alert-email-" + re.sub(r"[^a-z0-9]+", "-", email.lower())),
            gcp.monitoring.NotificationChannelArgs(
                project=config.project,
                type="email",
                display_name=f"{placement.prefix} alerts: {email}",
                labels={"email_address": email},
            ),
            opts=scope.opts(),
        )
        channels.append(channel.name)
    return tuple(channels)


# --- metrics ----------------------------------------------------------------------------


def counter(
    scope: MonitoringScope, suffix: str, description: str, filter_: str, labels: dict[str, str]
) -> gcp.logging.Metric:
    """A counter of matching entries (DELTA, INT64), labelled from jsonPayload fields."""
    place = scope.placement
    return gcp.logging.Metric(
        place.name(f"metric-{suffix}"),
        gcp.logging.MetricArgs(
            project=scope.config.project,
            name=place.name(suffix),
            description=description,
            filter=filter_,
            metric_descriptor=gcp.logging.MetricMetricDescriptorArgs(
                metric_kind="DELTA",
                value_type="INT64",
                unit="1",
                labels=_labels(*labels) or None,
            ),
            label_extractors={key: f"EXTRACT({field})" for key, field in labels.items()} or None,
        ),
        opts=scope.opts(),
    )


def distribution(
    scope: MonitoringScope,
    suffix: str,
    description: str,
    filter_: str,
    field: str,
    unit: str,
    buckets: gcp.logging.MetricBucketOptionsArgs,
) -> gcp.logging.Metric:
    """A distribution of a numeric jsonPayload field, per job."""
    place = scope.placement
    return gcp.logging.Metric(
        place.name(f"metric-{suffix}"),
        gcp.logging.MetricArgs(
            project=scope.config.project,
            name=place.name(suffix),
            description=description,
            filter=filter_,
            metric_descriptor=gcp.logging.MetricMetricDescriptorArgs(
                metric_kind="DELTA", value_type="DISTRIBUTION", unit=unit, labels=_labels("job")
            ),
            value_extractor=f"EXTRACT({field})",
            label_extractors={"job": "EXTRACT(jsonPayload.job)"},
            bucket_options=buckets,
        ),
        opts=scope.opts(),
    )


# --- alert policies ---------------------------------------------------------------------


def metric_filter(metric: gcp.logging.Metric, selector: str = "") -> pulumi.Output[str]:
    """A Monitoring filter on `metric`; built from its name, so the policy waits for it."""
    return pulumi.Output.concat(
        f'resource.type="{RESOURCE_TYPE}" AND metric.type="{LOG_METRIC_PREFIX}',
        metric.name,
        '"',
        f" AND {selector}" if selector else "",
    )


def condition(
    metric: gcp.logging.Metric,
    title: str,
    selector: str,
    window_s: int,
    group_by: Sequence[str],
) -> gcp.monitoring.AlertPolicyConditionArgs:
    """More than zero matching entries in a window (summed per `group_by`)."""
    return gcp.monitoring.AlertPolicyConditionArgs(
        display_name=title,
        condition_threshold=gcp.monitoring.AlertPolicyConditionConditionThresholdArgs(
            filter=metric_filter(metric, selector),
            comparison="COMPARISON_GT",
            threshold_value=0,
            # For the window-long ledger condition: failing throughout the window.
            duration=f"{window_s if window_s > 60 else 0}s",
            aggregations=[
                gcp.monitoring.AlertPolicyConditionConditionThresholdAggregationArgs(
                    alignment_period=f"{window_s}s",
                    per_series_aligner="ALIGN_SUM",
                    cross_series_reducer="REDUCE_SUM",
                    group_by_fields=list(group_by) or None,
                )
            ],
        ),
    )


def threshold_alert(
    scope: MonitoringScope,
    suffix: str,
    title: str,
    documentation: str,
    severity: str,
    conditions: Sequence[tuple[gcp.logging.Metric, str, str]],
    extra: gcp.monitoring.AlertPolicyConditionArgs | None = None,
    window_s: int = 60,
    group_by: Sequence[str] = ("metric.label.job",),
) -> gcp.monitoring.AlertPolicy:
    """A policy alerting on any entry matching one of `conditions` (metric, title,
    selector), plus an `extra` condition built elsewhere."""
    built = [
        condition(metric, name, selector, window_s, group_by)
        for metric, name, selector in conditions
    ]
    return policy(
        scope, suffix, title, documentation, severity, [*built, *([extra] if extra else [])]
    )


def policy(
    scope: MonitoringScope,
    suffix: str,
    title: str,
    documentation: str,
    severity: str,
    conditions: list[gcp.monitoring.AlertPolicyConditionArgs],
) -> gcp.monitoring.AlertPolicy:
    """An alert policy met by any of `conditions`, notifying the scope's channels."""
    place = scope.placement
    return gcp.monitoring.AlertPolicy(
        place.name(suffix),
        gcp.monitoring.AlertPolicyArgs(
            project=scope.config.project,
            display_name=f"{place.prefix}: {title}",
            combiner="OR",
            conditions=conditions,
            severity=severity,
            documentation=gcp.monitoring.AlertPolicyDocumentationArgs(
                content=documentation, mime_type="text/markdown"
            ),
            notification_channels=list(scope.channels) or None,
            user_labels={"stack": place.prefix},
        ),
        opts=scope.opts(),
    )
