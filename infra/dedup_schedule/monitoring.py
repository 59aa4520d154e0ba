"""`RunMonitoring`: log-based metrics from the handler's log lines, alerts on them, a dashboard.

The handler writes one JSON line per request (`runledger.app`: `outcome`, `status`,
`job`, `attempts`, `duration_ms`, ...) and the audit one per finding plus one
summary (`runledger.audit`). Cloud Logging parses them into `jsonPayload`; Cloud
Run functions (2nd gen) log under the monitored resource `cloud_run_revision`,
with the function's Cloud Run service in `resource.labels.service_name`.

Log-based metrics ("Log-based metrics overview", Cloud Logging) count the
entries that match a filter, with labels extracted from fields
(`EXTRACT(jsonPayload.job)`), or record a value per entry as a distribution
(`value_extractor`). Each alert policy below sits right after the metric it
watches. The outcome names come from `runledger.facts`, which the policy pack
shares, and tests check them against the lines the handler really writes.

A first `pulumi up` may fail to create an alert policy with 404 "Cannot find
metric(s) ... If a metric was created recently, it could take up to 10 minutes
to become available" (hashicorp/terraform-provider-google#11102); run it again
after a few minutes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from dedup_schedule.config import ScheduleConfig
from dedup_schedule.config_audit import audit_absence_s
from dedup_schedule.placement import Placement
from runledger import facts

LOG_METRIC_PREFIX = "logging.googleapis.com/user/"
# The monitored resource of a Cloud Run function's (2nd gen) logs and metrics.
RESOURCE_TYPE = "cloud_run_revision"
# Ledger failures must go on this long before they page: one bad delivery is retried.
LEDGER_OUTAGE_S = 300


@dataclass(frozen=True)
class RunMonitoringArgs:
    """Inputs of `RunMonitoring`.

    config: the validated stack config (project, jobs, audit and alert channels).
    service_name: the Cloud Run service the handler runs as (`resource.labels.service_name`).
    """

    placement: Placement
    config: ScheduleConfig
    service_name: str


def _one_of(values: Sequence[str]) -> str:
    """A Logging query value list, ("a" OR "b") ("Logging query language")."""
    return "(" + " OR ".join(f'"{value}"' for value in values) + ")"


def _label_in(label: str, values: Sequence[str]) -> str:
    """A Monitoring filter on a metric label: metric.label.L=one_of("a","b") (filter syntax)."""
    return f"metric.label.{label}=one_of(" + ",".join(f'"{value}"' for value in values) + ")"


def _labels(*keys: str) -> list[gcp.logging.MetricMetricDescriptorLabelArgs]:
    return [
        gcp.logging.MetricMetricDescriptorLabelArgs(key=key, value_type="STRING") for key in keys
    ]


class RunMonitoring(pulumi.ComponentResource):
    """What the handler's log lines say about every run, as metrics, alerts and a dashboard."""

    alert_policies: list[gcp.monitoring.AlertPolicy]
    notification_channels: pulumi.Output[list[str]]
    dashboard: gcp.monitoring.Dashboard

    def __init__(
        self, name: str, args: RunMonitoringArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("scheduler-dedup:index:RunMonitoring", name, None, opts)
        self._args = args
        cfg = args.config
        # Every entry the handler writes: its function's service, nothing else in the project.
        self._lines = (
            f'resource.type="{RESOURCE_TYPE}" AND '
            f'resource.labels.service_name="{args.service_name}"'
        )
        # The per-request line is the only one with duration_ms (runledger.app.App.handle).
        self._requests = f"{self._lines} AND jsonPayload.duration_ms>=0"
        self._channels = self._notification_channels()
        self.alert_policies = []
        # Findings first: the alert on failed runs also watches the audit's failed findings.
        findings = self._findings_metric()
        runs = self._runs_metric(findings)
        attempts = self._distribution(
            "attempts",
            "Attempts of each run claimed by a delivery, per job",
            f"{self._requests} AND jsonPayload.attempts>=1",
            "jsonPayload.attempts",
            "1",
            # 1..8 attempts, one bucket each (Scheduler retries at most 5 times).
            gcp.logging.MetricBucketOptionsArgs(
                linear_buckets=gcp.logging.MetricBucketOptionsLinearBucketsArgs(
                    num_finite_buckets=8, offset=1, width=1
                )
            ),
        )
        latency = self._distribution(
            "latency",
            "Time the handler took to answer a delivery, per job",
            self._requests,
            "jsonPayload.duration_ms",
            "ms",
            # 10 ms up to about 87 minutes, doubling: past the longest request timeout.
            gcp.logging.MetricBucketOptionsArgs(
                exponential_buckets=gcp.logging.MetricBucketOptionsExponentialBucketsArgs(
                    num_finite_buckets=20, growth_factor=2, scale=10
                )
            ),
        )
        audits = self._audit_metric() if cfg.audit.enabled else None
        self.notification_channels = pulumi.Output.all(*self._channels)
        self.dashboard = self._dashboard(
            [metric for metric in (runs, findings, attempts, latency, audits) if metric]
        )
        self.register_outputs(
            {
                "alertPolicies": [policy.name for policy in self.alert_policies],
                "notificationChannels": self.notification_channels,
                "dashboard": self.dashboard.id,
            }
        )

    def _opts(self, depends_on: Sequence[pulumi.Resource] = ()) -> pulumi.ResourceOptions:
        """Options of this component's resources: created after the split by concern, so
        (unlike `Placement.opts`) without an alias to a previous parent."""
        return pulumi.ResourceOptions(
            parent=self, depends_on=[*self._args.placement.apis, *depends_on]
        )

    # --- notification channels ----------------------------------------------------------

    def _notification_channels(self) -> list[pulumi.Input[str]]:
        """The configured channel ids, and one e-mail channel per configured address."""
        cfg, place = self._args.config, self._args.placement
        channels: list[pulumi.Input[str]] = list(cfg.alerts.notification_channels)
        for email in cfg.alerts.emails:
            channel = gcp.monitoring.NotificationChannel(
                place.name("alert-email-" + re.sub(r"[^a-z0-9]+", "-", email.lower())),
                gcp.monitoring.NotificationChannelArgs(
                    project=cfg.project,
                    type="email",
                    display_name=f"{place.prefix} alerts: {email}",
                    labels={"email_address": email},
                ),
                opts=self._opts(),
            )
            channels.append(channel.name)
        return channels

    # --- metrics, each followed by the alerts that watch it ------------------------------

    def _counter(
        self, suffix: str, description: str, filter_: str, labels: dict[str, str]
    ) -> gcp.logging.Metric:
        """A counter of matching entries (DELTA, INT64), labelled from jsonPayload fields."""
        cfg, place = self._args.config, self._args.placement
        return gcp.logging.Metric(
            place.name(f"metric-{suffix}"),
            gcp.logging.MetricArgs(
                project=cfg.project,
                name=place.name(suffix),
                description=description,
                filter=filter_,
                metric_descriptor=gcp.logging.MetricMetricDescriptorArgs(
                    metric_kind="DELTA",
                    value_type="INT64",
                    unit="1",
                    labels=_labels(*labels) or None,
                ),
                label_extractors={key: f"EXTRACT({field})" for key, field in labels.items()}
                or None,
            ),
            opts=self._opts(),
        )

    def _runs_metric(self, findings: gcp.logging.Metric) -> gcp.logging.Metric:
        runs = self._counter(
            "runs",
            "Deliveries the handler answered, by outcome and job",
            self._requests,
            {"outcome": "jsonPayload.outcome", "job": "jsonPayload.job"},
        )
        self._threshold_alert(
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
            extra=self._findings_condition(
                findings, "Audit found a failed run", (facts.OUTCOME_RUN_FAILED,)
            ),
        )
        self._threshold_alert(
            "alert-ledger",
            "Run ledger unavailable",
            "The handler could not read or write its Firestore ledger for several minutes "
            "(outcome store_unavailable, store_permission_denied or store_unusable), so no "
            "run can be claimed. Check Firestore's status, the runtime account's grant on "
            "the ledger database, and the database itself.",
            "CRITICAL",
            [
                (
                    runs,
                    "Ledger errors in every 5 minutes",
                    _label_in("outcome", facts.LEDGER_UNAVAILABLE_OUTCOMES),
                )
            ],
            window_s=LEDGER_OUTAGE_S,
            group_by=(),
        )
        return runs

    def _findings_metric(self) -> gcp.logging.Metric:
        kinds = (*facts.MISSED_RUN_OUTCOMES, facts.OUTCOME_RUN_FAILED)
        findings = self._counter(
            "findings",
            "Scheduled runs the audit found missed, stale, failed or released, by kind and job",
            f"{self._lines} AND jsonPayload.outcome={_one_of(kinds)}",
            {"kind": "jsonPayload.outcome", "job": "jsonPayload.job"},
        )
        condition = self._findings_condition(
            findings, "Audit found a missed, stale or released run", facts.MISSED_RUN_OUTCOMES
        )
        self._threshold_alert(
            "alert-missed",
            "Scheduled run missed",
            "The audit found a scheduled run that never finished: no record (missed), a "
            "lease that ran out (stale), or a retryable failure after Scheduler's last retry "
            "(released). Check the Scheduler job (paused? failing attempts?) and the handler's "
            "deploys; with catchUp on, the audit runs it itself (see the finding's catch_up).",
            "ERROR",
            [],
            extra=condition,
        )
        return findings

    def _findings_condition(
        self, findings: gcp.logging.Metric, title: str, kinds: Sequence[str]
    ) -> gcp.monitoring.AlertPolicyConditionArgs:
        """Any finding of the given kinds, per job."""
        return self._condition(findings, title, _label_in("kind", kinds), 60, ("metric.label.job",))

    def _distribution(
        self,
        suffix: str,
        description: str,
        filter_: str,
        field: str,
        unit: str,
        buckets: gcp.logging.MetricBucketOptionsArgs,
    ) -> gcp.logging.Metric:
        """A distribution of a numeric jsonPayload field, per job."""
        cfg, place = self._args.config, self._args.placement
        return gcp.logging.Metric(
            place.name(f"metric-{suffix}"),
            gcp.logging.MetricArgs(
                project=cfg.project,
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
            opts=self._opts(),
        )

    def _audit_metric(self) -> gcp.logging.Metric:
        audits = self._counter(
            "audits",
            "Audits that ran to the end (their summary line)",
            f'{self._lines} AND jsonPayload.outcome="{facts.OUTCOME_AUDIT_SUMMARY}"',
            {},
        )
        # Cloud Monitoring "Create metric-absence alerting policies": the condition is met
        # when a time series has no data for the trigger absence time (at most 23.5 h),
        # and only once the metric has written a point after the policy was created. So
        # it watches an audit that ran at least once and then stopped.
        absent = audit_absence_s(self._args.config)
        self._policy(
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
                        filter=self._metric_filter(audits),
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
        return audits

    # --- alert policies ------------------------------------------------------------------

    @staticmethod
    def _metric_filter(metric: gcp.logging.Metric, selector: str = "") -> pulumi.Output[str]:
        """A Monitoring filter on `metric`; built from its name, so the policy waits for it."""
        return pulumi.Output.concat(
            f'resource.type="{RESOURCE_TYPE}" AND metric.type="{LOG_METRIC_PREFIX}',
            metric.name,
            '"',
            f" AND {selector}" if selector else "",
        )

    def _condition(
        self,
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
                filter=self._metric_filter(metric, selector),
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

    def _threshold_alert(
        self,
        suffix: str,
        title: str,
        documentation: str,
        severity: str,
        conditions: Sequence[tuple[gcp.logging.Metric, str, str]],
        extra: gcp.monitoring.AlertPolicyConditionArgs | None = None,
        window_s: int = 60,
        group_by: Sequence[str] = ("metric.label.job",),
    ) -> None:
        built = [
            self._condition(metric, name, selector, window_s, group_by)
            for metric, name, selector in conditions
        ]
        self._policy(suffix, title, documentation, severity, [*built, *([extra] if extra else [])])

    def _policy(
        self,
        suffix: str,
        title: str,
        documentation: str,
        severity: str,
        conditions: list[gcp.monitoring.AlertPolicyConditionArgs],
    ) -> None:
        cfg, place = self._args.config, self._args.placement
        self.alert_policies.append(
            gcp.monitoring.AlertPolicy(
                place.name(suffix),
                gcp.monitoring.AlertPolicyArgs(
                    project=cfg.project,
                    display_name=f"{place.prefix}: {title}",
                    combiner="OR",
                    conditions=conditions,
                    severity=severity,
                    documentation=gcp.monitoring.AlertPolicyDocumentationArgs(
                        content=documentation, mime_type="text/markdown"
                    ),
                    notification_channels=self._channels or None,
                    user_labels={"stack": place.prefix},
                ),
                opts=self._opts(),
            )
        )

    # --- dashboard -----------------------------------------------------------------------

    def _dashboard(self, metrics: list[gcp.logging.Metric]) -> gcp.monitoring.Dashboard:
        """Runs by outcome per job, findings, attempts and latency (and audits, if on)."""
        cfg, place = self._args.config, self._args.placement
        tiles: list[tuple[str, str, dict[str, Any], str]] = [
            (
                "Runs by outcome and job",
                place.name("runs"),
                _sum("metric.label.outcome", "metric.label.job"),
                "STACKED_BAR",
            ),
            (
                "Audit findings by kind and job",
                place.name("findings"),
                _sum("metric.label.kind", "metric.label.job"),
                "STACKED_BAR",
            ),
            (
                "Attempts per run (99th percentile), by job",
                place.name("attempts"),
                _percentile(),
                "LINE",
            ),
            (
                "Handler latency in ms (99th percentile), by job",
                place.name("latency"),
                _percentile(),
                "LINE",
            ),
        ]
        if cfg.audit.enabled:
            tiles.append(("Audits finished", place.name("audits"), _sum(), "STACKED_BAR"))
        layout = {
            "displayName": f"{place.prefix}: scheduled runs",
            "mosaicLayout": {
                "columns": 48,
                "tiles": [
                    {
                        "xPos": 24 * (index % 2),
                        "yPos": 16 * (index // 2),
                        "width": 24,
                        "height": 16,
                        "widget": _chart(title, metric, aggregation, plot),
                    }
                    for index, (title, metric, aggregation, plot) in enumerate(tiles)
                ],
            },
        }
        return gcp.monitoring.Dashboard(
            place.name("dashboard"),
            gcp.monitoring.DashboardArgs(project=cfg.project, dashboard_json=json.dumps(layout)),
            opts=self._opts(metrics),
        )


def _sum(*group_by: str) -> dict[str, Any]:
    return {
        "alignmentPeriod": "300s",
        "perSeriesAligner": "ALIGN_SUM",
        "crossSeriesReducer": "REDUCE_SUM",
        "groupByFields": list(group_by),
    }


def _percentile() -> dict[str, Any]:
    return {
        "alignmentPeriod": "300s",
        "perSeriesAligner": "ALIGN_DELTA",
        "crossSeriesReducer": "REDUCE_PERCENTILE_99",
        "groupByFields": ["metric.label.job"],
    }


def _chart(title: str, metric: str, aggregation: dict[str, Any], plot: str) -> dict[str, Any]:
    return {
        "title": title,
        "xyChart": {
            "dataSets": [
                {
                    "plotType": plot,
                    "timeSeriesQuery": {
                        "timeSeriesFilter": {
                            "filter": (
                                f'metric.type="{LOG_METRIC_PREFIX}{metric}" '
                                f'resource.type="{RESOURCE_TYPE}"'
                            ),
                            "aggregation": aggregation,
                        }
                    },
                }
            ]
        },
    }
