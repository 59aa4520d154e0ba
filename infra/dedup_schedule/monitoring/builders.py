"""What every part of `RunMonitoring` builds with: filters, metrics, conditions, policies.

The metrics (`monitoring.metrics`), the alert policies (`monitoring.alerts`), the
notification channels (`monitoring.channels`) and the dashboard (`monitoring.dashboard`)
each take a `MonitoringScope`, so every resource they create gets the same project,
names, parent, API dependencies and notification channels without reaching into the
component's state.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumiverse_time as time

from dedup_schedule.config.model import ScheduleConfig
from dedup_schedule.placement import Placement

LOG_METRIC_PREFIX = "logging.googleapis.com/user/"
# The monitored resource of a Cloud Run function's (2nd gen) logs and metrics.
RESOURCE_TYPE = "cloud_run_revision"
# How long alert policies wait after their log-based metrics are created. Cloud
# Monitoring refuses a policy whose filter names a log-based metric it does not know
# yet with 404 "Cannot find metric(s) ... If a metric was created recently, it could
# take up to 10 minutes to become available" (the API's own message, quoted in
# hashicorp/terraform-provider-google#11102, still open, and in
# GoogleCloudPlatform/cloud-foundation-fabric#3739); Cloud Logging's "Troubleshoot
# log-based metrics" also says updating them in Cloud Monitoring may take up to 10
# minutes. So the wait is the full 10 minutes: nothing reports when a metric is usable.
METRICS_AVAILABLE_WAIT = "600s"
# How a threshold condition over a log-based counter treats a time with no data.
# The counters are sparse: they have points only when a matching line was written,
# so between failures there is no data at all. Unset, that is
# EVALUATION_MISSING_DATA_NO_OP ("do not evaluate the condition to any value if there
# is no data", API `AlertPolicy.Condition.EvaluationMissingData`): an open incident
# stays open, and while it is open the same series meeting the condition again opens
# no new incident and sends no new notification ("Behavior of metric-based alerting
# policies": partial metric data, incidents and notifications per policy). INACTIVE
# evaluates no data as false, so the incident closes once the failures stop, and the
# next failure opens a new one and notifies.
MISSING_DATA = "EVALUATION_MISSING_DATA_INACTIVE"
# AlertStrategy.autoClose of the policies with threshold conditions: "If an alerting
# policy that was active has no data for this long, any open incidents will close"
# (API reference; default 7 days). 30 minutes: short enough that the next failed run
# of an hourly job pages again even if missing-data evaluation left an incident open.
AUTO_CLOSE = "1800s"
# The on-call page, from the repository root: one section per alert policy, headed
# "Alert: <the policy's title>", so its anchor is that heading's GitHub slug.
RUNBOOK = "docs/runbook.md"


@dataclass(frozen=True)
class MonitoringScope:
    """Where `RunMonitoring`'s resources go and what they watch.

    parent: the `RunMonitoring` component, parent of every resource built here.
    lines: the Logging filter matching every entry the handler writes.
    channels: the notification channels every alert policy notifies.
    metrics_ready: the wait (`wait_for_metrics`) every alert policy is created after.
    """

    placement: Placement
    config: ScheduleConfig
    parent: pulumi.Resource
    lines: str
    channels: tuple[pulumi.Input[str], ...] = ()
    metrics_ready: pulumi.Resource | None = None

    @property
    def requests(self) -> str:
        """The handler's per-request lines: the only ones with duration_ms
        (runledger.service.app.App.handle)."""
        return f"{self.lines} AND jsonPayload.duration_ms>=0"

    def opts(self, depends_on: Sequence[pulumi.Resource] = ()) -> pulumi.ResourceOptions:
        """Options of this component's resources: created after the split by concern, so
        (unlike `Placement.opts`) without an alias to a previous parent."""
        return pulumi.ResourceOptions(
            parent=self.parent, depends_on=[*self.placement.apis, *depends_on]
        )


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


def wait_for_metrics(scope: MonitoringScope, metrics: Sequence[gcp.logging.Metric]) -> time.Sleep:
    """A create-only wait of `METRICS_AVAILABLE_WAIT` that starts once every metric exists.

    Its triggers are the metrics' ids: a later `up` that adds or replaces a metric
    waits again before the policies that are new with it; an unchanged stack never waits.
    """
    place = scope.placement
    return time.Sleep(
        place.name("metrics-wait"),
        time.SleepArgs(
            create_duration=METRICS_AVAILABLE_WAIT,
            triggers={f"metric{index}": metric.id for index, metric in enumerate(metrics)},
        ),
        opts=scope.opts(metrics),
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
    more_than: int = 0,
) -> gcp.monitoring.AlertPolicyConditionArgs:
    """More than `more_than` matching entries in a window (summed per `group_by`), no data
    counting as not met (`MISSING_DATA`)."""
    return gcp.monitoring.AlertPolicyConditionArgs(
        display_name=title,
        condition_threshold=gcp.monitoring.AlertPolicyConditionConditionThresholdArgs(
            filter=metric_filter(metric, selector),
            comparison="COMPARISON_GT",
            threshold_value=more_than,
            duration="0s",
            evaluation_missing_data=MISSING_DATA,
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
    more_than: int = 0,
) -> gcp.monitoring.AlertPolicy:
    """A policy alerting on more than `more_than` entries matching one of `conditions`
    (metric, title, selector), plus an `extra` condition built elsewhere."""
    built = [
        condition(metric, name, selector, window_s, group_by, more_than)
        for metric, name, selector in conditions
    ]
    return policy(
        scope,
        suffix,
        title,
        documentation,
        severity,
        [*built, *([extra] if extra else [])],
        auto_close=AUTO_CLOSE,
    )


def runbook_link(title: str) -> str:
    """The Markdown link to the runbook's section on the alert policy titled `title`.

    Cloud Monitoring renders `documentation.content` of mime type text/markdown with a
    subset of Markdown that includes "Links, indicated by [link text](url) syntax"
    ("Annotate notifications with user-defined documentation", Using Markdown), in
    e-mail ("Policy Documentation"), PagerDuty, Pub/Sub, Slack and webhooks. The URL is
    the path in the repository that deploys the stack; the link text says it too, for
    a notification that cannot resolve a relative link.
    """
    section = f"{RUNBOOK}#alert-{re.sub(r'[^a-z0-9]+', '-', title.lower()).strip('-')}"
    return f"Runbook: [{section}]({section})"


def policy(
    scope: MonitoringScope,
    suffix: str,
    title: str,
    documentation: str,
    severity: str,
    conditions: list[gcp.monitoring.AlertPolicyConditionArgs],
    auto_close: str | None,
) -> gcp.monitoring.AlertPolicy:
    """An alert policy met by any of `conditions`, notifying the scope's channels.

    It is created after `scope.metrics_ready`, so the metrics its filters name exist
    in Cloud Monitoring by then. Its documentation ends with the link to its runbook
    section (`runbook_link`). auto_close: how long an incident stays open without
    data (None: Cloud Monitoring's default).
    """
    if scope.metrics_ready is None:
        raise ValueError(f"alert policy {suffix}: build it with the scope of wait_for_metrics")
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
                content=f"{documentation}\n\n{runbook_link(title)}", mime_type="text/markdown"
            ),
            notification_channels=list(scope.channels) or None,
            alert_strategy=gcp.monitoring.AlertPolicyAlertStrategyArgs(auto_close=auto_close)
            if auto_close
            else None,
            user_labels={"stack": place.prefix},
        ),
        opts=scope.opts([scope.metrics_ready]),
    )
