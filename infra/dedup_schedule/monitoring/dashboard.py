"""The schedule's dashboard: runs, findings, attempts, latency, runs past their deadline,
start lag (and audits, skips, if on).

Its charts name the log-based metrics by the names of the metric resources (Outputs),
so the dashboard is created after the metrics it charts.

The JSON leaves out every zero-valued and empty field (`xPos: 0`, `groupByFields: []`):
the API drops them from what it returns, so a JSON with them differs from the live
dashboard on every preview (hashicorp/terraform-provider-google#16173).
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_gcp as gcp

from dedup_schedule.monitoring.builders import LOG_METRIC_PREFIX, RESOURCE_TYPE, MonitoringScope
from dedup_schedule.monitoring.metrics import MonitoredMetrics
from runledger import facts


def dashboard(scope: MonitoringScope, metrics: MonitoredMetrics) -> gcp.monitoring.Dashboard:
    """Runs by outcome per job, findings, attempts and latency (and audits, skips, if on)."""
    tiles: list[tuple[str, gcp.logging.Metric, dict[str, Any], str, str]] = [
        (
            "Runs by outcome and job",
            metrics.runs,
            _sum("metric.label.outcome", "metric.label.job"),
            "STACKED_BAR",
            "",
        ),
        (
            "Audit findings by kind and job",
            metrics.findings,
            _sum("metric.label.kind", "metric.label.job"),
            "STACKED_BAR",
            "",
        ),
        (
            "Attempts per run (99th percentile), by job",
            metrics.attempts,
            _percentile(),
            "LINE",
            "",
        ),
        (
            "Handler latency in ms (99th percentile), by job",
            metrics.latency,
            _percentile(),
            "LINE",
            "",
        ),
        (
            "Runs past their attempt deadline (Scheduler gave up on the attempt), by job",
            metrics.outlived,
            _sum("metric.label.job"),
            "STACKED_BAR",
            "",
        ),
    ]
    if metrics.audits is not None:
        tiles.append(("Audits finished", metrics.audits, _sum(), "STACKED_BAR", ""))
    tiles.append(
        (
            "Start lag in s (99th percentile): schedule time to claim, by job",
            metrics.start_lag,
            _percentile(),
            "LINE",
            "",
        )
    )
    if any(job.overlap == "skip" for job in scope.config.jobs):
        # Deliveries an overlap policy skipped (runledger.ledger.overlap): deliberately not run.
        tiles.append(
            (
                "Runs skipped (overlap: skip), by job",
                metrics.runs,
                _sum("metric.label.job"),
                "STACKED_BAR",
                f'metric.label.outcome="{facts.OUTCOME_OVERLAP_SKIPPED}"',
            )
        )
    if any(job.suspend_after_failures is not None for job in scope.config.jobs):
        # Deliveries of a suspended job (runledger.ledger.suspension): deliberately not run.
        tiles.append(
            (
                "Runs not run: job suspended, by job",
                metrics.runs,
                _sum("metric.label.job"),
                "STACKED_BAR",
                f'metric.label.outcome="{facts.OUTCOME_SUSPENDED}"',
            )
        )
    if metrics.dead_letters is not None:
        tiles.append(
            (
                "Dead letters by outcome and kind",
                metrics.dead_letters,
                _sum("metric.label.outcome", "metric.label.kind"),
                "STACKED_BAR",
                "",
            )
        )
    names = pulumi.Output.all(*(tile[1].name for tile in tiles))
    return gcp.monitoring.Dashboard(
        scope.placement.name("dashboard"),
        gcp.monitoring.DashboardArgs(
            project=scope.config.project,
            dashboard_json=names.apply(lambda charted: _dashboard_json(scope, tiles, charted)),
        ),
        opts=scope.opts(),
    )


def _dashboard_json(
    scope: MonitoringScope,
    tiles: list[tuple[str, gcp.logging.Metric, dict[str, Any], str, str]],
    names: list[str],
) -> str:
    """The dashboard's JSON: one chart per tile, of the metric named `names[i]`."""
    place = scope.placement
    widgets = [
        _chart(title, name, aggregation, plot, labels)
        for (title, _, aggregation, plot, labels), name in zip(tiles, names, strict=True)
    ]
    if any(job.suspend_after_failures is not None for job in scope.config.jobs):
        widgets.append(_suspensions_panel(scope))
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
                    "widget": widget,
                }
                for index, widget in enumerate(widgets)
            ],
        },
    }
    return json.dumps(_without_defaults(layout))


def _suspensions_panel(scope: MonitoringScope) -> dict[str, Any]:
    """The audit's `job_suspended` lines: which job, by whom, since when, why (their detail)."""
    return {
        "title": "Suspensions: job, by whom, since when, why",
        "logsPanel": {
            "filter": f'{scope.lines} AND jsonPayload.outcome="{facts.OUTCOME_JOB_SUSPENDED}"',
            "resourceNames": [f"projects/{scope.config.project}"],
        },
    }


def _without_defaults(value: Any) -> Any:
    """`value` without the zero numbers, empty strings, lists and maps the API leaves out."""
    if isinstance(value, dict):
        kept = {key: _without_defaults(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item not in (0, "", [], {})}
    if isinstance(value, list):
        return [_without_defaults(item) for item in value]
    return value


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


def _chart(
    title: str, metric: str, aggregation: dict[str, Any], plot: str, labels: str
) -> dict[str, Any]:
    """One chart of the metric `metric`; `labels` narrows it to some of its series."""
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
                                + (f" {labels}" if labels else "")
                            ),
                            "aggregation": aggregation,
                        }
                    },
                }
            ]
        },
    }
