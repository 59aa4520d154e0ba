"""Advisory: a deduplicated schedule pages someone when a run fails for good or never happens.

The ledger makes a run happen at most once; nobody learns of a run that failed
terminally or was missed unless an alert watches the handler's log lines. The
handler writes `outcome` values (shared facts: `FAILED_RUN_OUTCOMES`,
`OUTCOME_RUN_MISSED`) that log-based metrics count and alert policies watch.
An alert policy condition watches an outcome when it references a log-based
metric of the stack (`logging.googleapis.com/user/NAME`) and the outcome is
named in the condition or, if the condition names none, in the metric's filter;
or when a log-match condition names it directly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from dedup_policies import stack_view, types
from dedup_policies.facts import (
    FAILED_RUN_OUTCOMES,
    LEDGER_UNAVAILABLE_OUTCOMES,
    MISSED_RUN_OUTCOMES,
    OUTCOME_AUDIT_SUMMARY,
    OUTCOME_RUN_MISSED,
)
from dedup_policies.props import as_list, as_text, get_path
from dedup_policies.unknowns import Deferred

LOG_METRIC_PREFIX = "logging.googleapis.com/user/"
_OUTCOMES = (
    *FAILED_RUN_OUTCOMES,
    *MISSED_RUN_OUTCOMES,
    *LEDGER_UNAVAILABLE_OUTCOMES,
    OUTCOME_AUDIT_SUMMARY,
)
# Where an alert policy condition names what it watches (pulumi-gcp AlertPolicyCondition).
_CONDITION_TEXTS = (
    ("conditionThreshold", "filter"),
    ("conditionAbsent", "filter"),
    ("conditionMatchedLog", "filter"),
    ("conditionMonitoringQueryLanguage", "query"),
    ("conditionPrometheusQueryLanguage", "query"),
    ("conditionSql", "query"),
)
# Characters a log-based metric name may contain (logging.Metric `name`).
_NAME_CHARS = r"[A-Za-z0-9_\-.,+!*'()%/]"


def _named(text: str) -> set[str]:
    """The handler outcomes a filter or query names, as quoted values."""
    return {outcome for outcome in _OUTCOMES if re.search(rf"\b{outcome}\b", text)}


def _metric_filters(resources: Iterable[PolicyResource]) -> dict[str, str]:
    return {
        name: as_text(get_path(r.props, "filter")) or ""
        for r in resources
        if r.resource_type == types.LOG_METRIC and (name := as_text(get_path(r.props, "name")))
    }


def _watched(resources: list[PolicyResource]) -> set[str]:
    """Every handler outcome some enabled alert policy of the stack watches."""
    metrics = _metric_filters(resources)
    watched: set[str] = set()
    for policy in resources:
        if policy.resource_type != types.ALERT_POLICY:
            continue
        if get_path(policy.props, "enabled") is False:
            continue
        for condition in as_list(get_path(policy.props, "conditions")):
            for path in _CONDITION_TEXTS:
                text = as_text(get_path(condition, *path)) or ""
                named = _named(text)
                if path[0] == "conditionMatchedLog":
                    watched |= named
                    continue
                for name, metric_filter in metrics.items():
                    reference = re.escape(LOG_METRIC_PREFIX + name) + f"(?!{_NAME_CHARS})"
                    if re.search(reference, text):
                        watched |= named or _named(metric_filter)
    return watched


_MISSING = (
    (
        "failed",
        FAILED_RUN_OUTCOMES,
        "runs that fail for good (a job raised TerminalJobError, or the audit found a failed run)",
    ),
    ("missed", (OUTCOME_RUN_MISSED,), "scheduled runs the audit found missed"),
)


def _alerting(args: StackValidationArgs, report: ReportViolation) -> None:
    resources = list(args.resources)

    def check() -> None:
        handlers = stack_view.build(resources).dedup_handlers()
        if not handlers:
            return
        watched = _watched(resources)
        for _kind, outcomes, what in _MISSING:
            if watched & set(outcomes):
                continue
            names = " or ".join(repr(outcome) for outcome in outcomes)
            for handler in handlers:
                report(
                    f"No alert policy of this stack watches {what} of {handler.label}: add a "
                    f"gcp.logging.Metric counting its log lines with outcome {names} and a "
                    "gcp.monitoring.AlertPolicy on that metric (the DedupSchedule component's "
                    "RunMonitoring creates both), or nobody learns of them.",
                    handler.resource.urn,
                )

    with Deferred() as later:
        later.run(check)


dedup_alerting = StackValidationPolicy(
    name="dedup-run-alerting",
    description="A deduplicated schedule has alert policies on failed and on missed runs, "
    "watching log-based metrics of the handler's outcomes.",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=_alerting,
)

POLICIES = [dedup_alerting]
