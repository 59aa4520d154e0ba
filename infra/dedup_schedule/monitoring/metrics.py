"""The log-based metrics `RunMonitoring` derives from the handler's log lines.

Every delivery the handler answers writes one line with its `outcome`, `job`,
`attempts` and `duration_ms` (`runledger.service.app`): the runs counter by outcome,
and the attempts and latency distributions. A line whose run outlived its job's
attempt deadline says by how much (`runledger.delivery.deadline`): the
outlived-deadline counter. The audit logs one line per scheduled run it finds
missed, stale, failed or released, one per job it could not judge (drifted,
unauditable), and one summary per audit that ran to the end
(`runledger.audit.runner`): the findings counter by kind, and the audits counter,
whose absence shows an audit that stopped running (its findings alert then stays
silent).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi_gcp as gcp

from dedup_schedule.monitoring.builders import MonitoringScope, counter, distribution, one_of
from runledger import facts


@dataclass(frozen=True)
class MonitoredMetrics:
    """The log-based metrics, each created before any alert policy.

    audits: the audits counter, None when the stack's audit is disabled.
    """

    runs: gcp.logging.Metric
    findings: gcp.logging.Metric
    attempts: gcp.logging.Metric
    latency: gcp.logging.Metric
    outlived: gcp.logging.Metric
    audits: gcp.logging.Metric | None
    # Cross-region duplicates, in a stack of several regions only (None: one region).
    cross_region: gcp.logging.Metric | None = None

    def all(self) -> list[gcp.logging.Metric]:
        """Every metric, in the dashboard's order."""
        ordered = [
            self.runs,
            self.findings,
            self.attempts,
            self.latency,
            self.outlived,
            self.audits,
            self.cross_region,
        ]
        return [metric for metric in ordered if metric is not None]


def create_metrics(scope: MonitoringScope) -> MonitoredMetrics:
    """Every metric of the stack (the audits counter only with the audit enabled)."""
    return MonitoredMetrics(
        runs=run_outcomes(scope),
        findings=findings(scope),
        attempts=attempts(scope),
        latency=latency(scope),
        outlived=outlived_deadline(scope),
        audits=audit_heartbeat(scope) if scope.config.audit.enabled else None,
        cross_region=cross_region(scope) if scope.config.extra_regions else None,
    )


def run_outcomes(scope: MonitoringScope) -> gcp.logging.Metric:
    """The runs counter, by outcome and job."""
    return counter(
        scope,
        "runs",
        "Deliveries the handler answered, by outcome and job",
        scope.requests,
        {"outcome": "jsonPayload.outcome", "job": "jsonPayload.job"},
    )


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


def attempts(scope: MonitoringScope) -> gcp.logging.Metric:
    """Attempts per claimed run, per job: how often Scheduler had to retry."""
    return distribution(
        scope,
        "attempts",
        "Attempts of each run claimed by a delivery, per job",
        f"{scope.requests} AND jsonPayload.attempts>=1",
        "jsonPayload.attempts",
        "1",
        # 1..8 attempts, one bucket each (Scheduler retries at most 5 times).
        gcp.logging.MetricBucketOptionsArgs(
            linear_buckets=gcp.logging.MetricBucketOptionsLinearBucketsArgs(
                num_finite_buckets=8, offset=1, width=1
            )
        ),
    )


def latency(scope: MonitoringScope) -> gcp.logging.Metric:
    """The handler's answer time per delivery, per job."""
    return distribution(
        scope,
        "latency",
        "Time the handler took to answer a delivery, per job",
        scope.requests,
        "jsonPayload.duration_ms",
        "ms",
        # 10 ms doubling 20 times: the top finite bound is 10 ms * 2^20, about 175
        # minutes, past the longest request timeout (60 minutes).
        gcp.logging.MetricBucketOptionsArgs(
            exponential_buckets=gcp.logging.MetricBucketOptionsExponentialBucketsArgs(
                num_finite_buckets=20, growth_factor=2, scale=10
            )
        ),
    )


def outlived_deadline(scope: MonitoringScope) -> gcp.logging.Metric:
    """Runs that went on past their job's attempt deadline, per job.

    Scheduler has ended such an attempt (and may retry it) while the job still runs;
    whether Cloud Run keeps CPU for a request whose caller has gone is not
    documented, so each one is a risk to see before it bites (docs/work.md).
    """
    return counter(
        scope,
        "outlived-deadline",
        "Runs that went on past their job's attempt deadline, per job",
        f"{scope.requests} AND jsonPayload.{facts.OUTLIVED_DEADLINE_FIELD}>0",
        {"job": "jsonPayload.job"},
    )


def cross_region(scope: MonitoringScope) -> gcp.logging.Metric:
    """Deliveries answered as the duplicate of another region's run, per job and region.

    In a stack of several regions every time is delivered once per region and runs
    once: these are the other regions' copies, counted apart from retries and never
    alerted on. A region whose count drops to zero while the others' run everything
    is out (docs/runbook.md, "A region is down").
    """
    return counter(
        scope,
        "cross-region",
        "Deliveries answered as duplicates of a run another region claimed, per job",
        f"{scope.requests} AND jsonPayload.{facts.CROSS_REGION_FIELD}:*",
        {"job": "jsonPayload.job", "ran_in": f"jsonPayload.{facts.CROSS_REGION_FIELD}"},
    )


def audit_heartbeat(scope: MonitoringScope) -> gcp.logging.Metric:
    """The audits counter: one per audit that ran to the end (its summary line)."""
    return counter(
        scope,
        "audits",
        "Audits that ran to the end (their summary line)",
        f'{scope.lines} AND jsonPayload.outcome="{facts.OUTCOME_AUDIT_SUMMARY}"',
        {},
    )
