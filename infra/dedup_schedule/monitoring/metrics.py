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
silent). A line whose delivery claimed its run says how long after the schedule time
(`start_lag_s`, `runledger.delivery.pipeline`): the start-lag distribution, and with
`alerts.startLagSeconds` the counter of runs that started later than that.
With `deadLetterTopic`, each dead letter's publish logs a line
(`runledger.delivery.dead_letter`): the dead letters counter.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi_gcp as gcp

from dedup_schedule.monitoring.builders import MonitoringScope, counter, distribution, one_of
from runledger import facts
from runledger.delivery.dead_letter import LOGGED_OUTCOMES


@dataclass(frozen=True)
class MonitoredMetrics:
    """The log-based metrics, each created before any alert policy.

    audits: the audits counter, None when the stack's audit is disabled.
    late_starts: the late-starts counter, None without `alerts.startLagSeconds`.
    """

    runs: gcp.logging.Metric
    findings: gcp.logging.Metric
    attempts: gcp.logging.Metric
    latency: gcp.logging.Metric
    outlived: gcp.logging.Metric
    audits: gcp.logging.Metric | None
    start_lag: gcp.logging.Metric
    late_starts: gcp.logging.Metric | None = None
    # The dead letters counter, None without `deadLetterTopic`.
    dead_letters: gcp.logging.Metric | None = None
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
            self.start_lag,
            self.late_starts,
            self.dead_letters,
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
        start_lag=start_lag(scope),
        late_starts=late_starts(scope) if scope.config.alerts.start_lag_s is not None else None,
        dead_letters=dead_letters(scope) if scope.config.dead_letter_topic else None,
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
    kinds = (
        *facts.MISSED_RUN_OUTCOMES,
        facts.OUTCOME_RUN_FAILED,
        *facts.JOB_FINDING_OUTCOMES,
        facts.OUTCOME_JOB_SUSPENDED,
    )
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


def dead_letters(scope: MonitoringScope) -> gcp.logging.Metric:
    """Dead letters published, or whose publish failed, by outcome, kind and job."""
    return counter(
        scope,
        "dead-letters",
        "Final failures published to the dead-letter topic (or not), by outcome, kind and job",
        f"{scope.lines} AND jsonPayload.outcome={one_of(LOGGED_OUTCOMES)}",
        {"outcome": "jsonPayload.outcome", "kind": "jsonPayload.kind", "job": "jsonPayload.job"},
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


def _lagged(scope: MonitoringScope) -> str:
    """The delivery lines that claimed a scheduled run: the only ones with a start lag."""
    return f"{scope.requests} AND jsonPayload.{facts.START_LAG_FIELD}:*"


def start_lag(scope: MonitoringScope) -> gcp.logging.Metric:
    """How long after its schedule time each scheduled run was claimed, per job.

    Cloud Scheduler that delivers late (a region's backlog, a job's retries, a cold
    handler) shows here before the audit reports anything missed.
    """
    return distribution(
        scope,
        "start-lag",
        "Seconds from a run's schedule time to its claim, per job",
        _lagged(scope),
        f"jsonPayload.{facts.START_LAG_FIELD}",
        "s",
        # 0.5 s doubling 22 times: the top finite bound is about 24 days, past any
        # retention; an early claim (an instance's clock ahead) falls in the underflow.
        gcp.logging.MetricBucketOptionsArgs(
            exponential_buckets=gcp.logging.MetricBucketOptionsExponentialBucketsArgs(
                num_finite_buckets=22, growth_factor=2, scale=0.5
            )
        ),
    )


def late_starts(scope: MonitoringScope) -> gcp.logging.Metric:
    """Runs claimed more than `alerts.startLagSeconds` after their schedule time, per job.

    A counter with the threshold in its filter, so the alert counts each late run
    exactly; a percentile of the distribution would only estimate within a bucket.
    """
    threshold = scope.config.alerts.start_lag_s
    return counter(
        scope,
        "late-starts",
        f"Runs claimed more than {threshold} s after their schedule time, per job",
        f"{_lagged(scope)} AND jsonPayload.{facts.START_LAG_FIELD}>{threshold}",
        {"job": "jsonPayload.job"},
    )
