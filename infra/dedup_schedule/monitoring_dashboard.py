"""The schedule's dashboard: runs, findings, attempts and latency (and audits, if on).

Its charts name the log-based metrics by their names (`<prefix>-runs`, ...), so the
dashboard is created after the metrics it charts.

The JSON leaves out every zero-valued and empty field (`xPos: 0`, `groupByFields: []`):
the API drops them from what it returns, so a JSON with them differs from the live
dashboard on every preview (hashicorp/terraform-provider-google#16173).
"""

from __future__ import annotations

import json
from typing import Any

import pulumi_gcp as gcp

from dedup_schedule.monitoring_build import LOG_METRIC_PREFIX, RESOURCE_TYPE, MonitoringScope
from runledger import facts


def dashboard(
    scope: MonitoringScope, metrics: list[gcp.logging.Metric]
) -> gcp.monitoring.Dashboard:
    """Runs by outcome per job, findings, attempts and latency (and audits, if on)."""
    cfg, place = scope.config, scope.placement
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
    widgets = [_chart(*tile) for tile in tiles]
    if any(job.overlap == "skip" for job in cfg.jobs):
        # Deliveries an overlap policy skipped (runledger.overlap): deliberately not run.
        skipped = f'metric.label.outcome="{facts.OUTCOME_OVERLAP_SKIPPED}"'
        runs = place.name("runs")
        widgets.append(
            _chart(
                "Runs skipped (overlap: skip), by job",
                runs,
                _sum("metric.label.job"),
                "STACKED_BAR",
                skipped,
            )
        )
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
    return gcp.monitoring.Dashboard(
        place.name("dashboard"),
        gcp.monitoring.DashboardArgs(
            project=cfg.project, dashboard_json=json.dumps(_without_defaults(layout))
        ),
        opts=scope.opts(metrics),
    )


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
    title: str, metric: str, aggregation: dict[str, Any], plot: str, labels: str = ""
) -> dict[str, Any]:
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
