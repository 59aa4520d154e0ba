"""Network ingress of the dedup handlers: reachable from the project, not from the internet.

Cloud Scheduler reaches a Cloud Run service whose ingress is internal-only only on
two conditions ("Restrict network ingress for Cloud Run": the internal setting allows
Cloud Scheduler, Cloud Tasks, Eventarc, Pub/Sub, Workflows and BigQuery): the job is
in the same project or VPC Service Controls perimeter, and it calls the service's
default run.app URL, not a custom domain. A handler that only Scheduler calls
therefore gains nothing from accepting internet traffic, and internal-only keeps it
from being reached at all by anyone outside, whatever IAM says; a job that calls an
internal-only handler by another of its URLs (a function's cloudfunctions.net URL) is
reported, since its deliveries would be refused.

The rule is advisory: ingress is a second layer on top of IAM, which the mandatory
rules already guard (no public invoker, invoker check on), and a stack may have a
reason for wider ingress (a load balancer in front, a caller outside the project).
Make it mandatory with `--policy-pack-config` where internal-only is the standard.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from dedup_policies import stack_view, types
from dedup_policies.props import as_mapping, as_text, get_path
from dedup_policies.stack_view import Handler, StackView
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


def _check_job_urls(view: StackView, handler: Handler, report: ReportViolation) -> None:
    """Jobs that call an internal-only handler by one of its URLs that is not a run.app one
    (a function's cloudfunctions.net URL, a custom audience). A job calling a URL that is no
    handler's at all is `scheduler-target-in-stack`'s to report."""
    for job in view.jobs_calling(handler):
        host = (urlsplit(job.uri).hostname or "") if job.uri else ""
        if not job.uri or host.endswith(".run.app"):
            continue
        report(
            f"{job.label} calls {handler.label} at {job.uri!r}, but the handler accepts "
            "internal traffic only, and Cloud Scheduler reaches an internal-only service only "
            "at its default run.app URL (not a custom domain), from the same project or VPC "
            'Service Controls perimeter ("Restrict network ingress for Cloud Run"): call the '
            "service's run.app URI (a function's `service_config.uri` output).",
            job.resource.urn,
        )


def _check_ingress(view: StackView, handler: Handler, report: ReportViolation) -> None:
    resource = handler.resource
    value, internal = ingress(resource.resource_type, resource.props)
    if internal:
        _check_job_urls(view, handler, report)
        return
    setting = _SETTING_NAME[resource.resource_type]
    report(
        f"{handler.label} accepts {value} ingress, so anyone on the internet can reach it "
        "(IAM still decides who gets in). Cloud Scheduler in the same project reaches an "
        f"internal-only service at its default run.app URL: set {setting} to internal-only "
        "(scheduler-dedup:ingress internal-only in this template).",
        resource.urn,
    )


def _handler_ingress_internal(args: StackValidationArgs, report: ReportViolation) -> None:
    view = stack_view.build(args.resources)
    with Deferred() as later:
        for handler in view.dedup_handlers():
            later.run(_check_ingress, view, handler, report)


handler_ingress_internal = StackValidationPolicy(
    name="run-handler-ingress-internal",
    description="Dedup handlers (the Cloud Run services and functions Scheduler jobs call) "
    "accept internal traffic only, and jobs call an internal-only handler at its run.app URL.",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=_handler_ingress_internal,
)

POLICIES = [handler_ingress_internal]
