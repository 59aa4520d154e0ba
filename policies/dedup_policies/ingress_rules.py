"""Network ingress of the dedup handlers: reachable from the project, not from the internet.

Cloud Scheduler in the same project reaches a Cloud Run service whose ingress is
internal-only at its run.app URL ("Restrict network ingress for Cloud Run": the
internal setting allows Cloud Scheduler, Cloud Tasks, Eventarc, Pub/Sub, Workflows
and BigQuery of the same project or VPC Service Controls perimeter). A handler that
only Scheduler calls therefore gains nothing from accepting internet traffic, and
internal-only keeps it from being reached at all by anyone outside, whatever IAM says.

The rule is advisory: ingress is a second layer on top of IAM, which the mandatory
rules already guard (no public invoker, invoker check on), and a stack may have a
reason for wider ingress (a load balancer in front, a caller outside the project).
Make it mandatory with `--policy-pack-config` where internal-only is the standard.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from dedup_policies import stack_view, types
from dedup_policies.props import as_mapping, as_text, get_path
from dedup_policies.stack_view import Handler
from dedup_policies.unknowns import Deferred

# What each resource type calls its ingress setting, its internal-only value and the
# platform default when the setting is left out.
_INGRESS = {
    types.FUNCTION_V2: (("serviceConfig", "ingressSettings"), "ALLOW_INTERNAL_ONLY", "ALLOW_ALL"),
    types.RUN_SERVICE_V2: (("ingress",), "INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_ALL"),
}
_V1_INGRESS_ANNOTATION = "run.googleapis.com/ingress"
_SETTING_NAME = {
    types.FUNCTION_V2: "service_config.ingress_settings",
    types.RUN_SERVICE_V2: "ingress",
    types.RUN_SERVICE_V1: f"the {_V1_INGRESS_ANNOTATION} annotation",
}


def ingress(resource_type: str, props: Mapping[str, Any]) -> tuple[str, bool]:
    """(the ingress setting in effect, whether it is internal-only)."""
    if resource_type == types.RUN_SERVICE_V1:
        annotations = as_mapping(get_path(props, "metadata", "annotations")) or {}
        value = as_text(annotations.get(_V1_INGRESS_ANNOTATION)) or "all"
        return value, value == "internal"
    path, internal, default = _INGRESS[resource_type]
    value = as_text(get_path(props, *path)) or default
    return value, value == internal


def _check_ingress(handler: Handler, report: ReportViolation) -> None:
    resource = handler.resource
    value, internal = ingress(resource.resource_type, resource.props)
    if internal:
        return
    setting = _SETTING_NAME[resource.resource_type]
    report(
        f"{handler.label} accepts {value} ingress, so anyone on the internet can reach it "
        "(IAM still decides who gets in). Cloud Scheduler in the same project reaches an "
        f"internal-only service at its run.app URL: set {setting} to internal-only "
        "(scheduler-dedup:ingress internal-only in this template).",
        resource.urn,
    )


def _handler_ingress_internal(args: StackValidationArgs, report: ReportViolation) -> None:
    view = stack_view.build(args.resources)
    with Deferred() as later:
        for handler in view.dedup_handlers():
            later.run(_check_ingress, handler, report)


handler_ingress_internal = StackValidationPolicy(
    name="run-handler-ingress-internal",
    description="Dedup handlers (the Cloud Run services and functions Scheduler jobs call) "
    "accept internal traffic only.",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=_handler_ingress_internal,
)

POLICIES = [handler_ingress_internal]
