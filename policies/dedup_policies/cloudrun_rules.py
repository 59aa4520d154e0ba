"""Rules on each Cloud Run service or function and on the IAM that guards it.

The Scheduler headers are not authenticated, so the handler is only as safe
as Cloud Run's invoker check: nobody public may invoke it, the check may not
be switched off, and the handler runs as an account of its own.
"""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

from dedup_policies import endpoints, handler_resource, types
from dedup_policies.accounts import shared_account_kind
from dedup_policies.iam_grants import PUBLIC_MEMBERS, grants


def _no_public_invoker(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in types.INVOKER_IAM_TYPES:
        return
    invoker = endpoints.invoker_role(args.resource_type)
    for role, member in grants(args.props):
        if member in PUBLIC_MEMBERS:
            report(
                f"{member} is granted {role or 'a role'} on the service, which makes it public; "
                f"remove it and grant {invoker} only to the service accounts that must call "
                "it (for a schedule, the Scheduler job's invoker account).",
                None,
            )


no_public_invoker = ResourceValidationPolicy(
    name="run-no-public-invoker",
    description="Cloud Run services and functions (1st and 2nd gen) are never invokable by "
    "allUsers or allAuthenticatedUsers.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_no_public_invoker,
)


def _invoker_iam_enabled(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in types.HANDLER_TYPES:
        return
    if handler_resource.invoker_iam_disabled(args.resource_type, args.props):
        report(
            "The invoker IAM check is disabled, which makes the service public; remove "
            "`invoker_iam_disabled` (or the run.googleapis.com/invoker-iam-disabled "
            "annotation) and grant roles/run.invoker to the invoker account instead.",
            None,
        )


invoker_iam_enabled = ResourceValidationPolicy(
    name="run-invoker-iam-enabled",
    description="Cloud Run services keep the invoker IAM check enabled.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_invoker_iam_enabled,
)


def _dedicated_service_account(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in types.ENDPOINT_TYPES:
        return
    try:
        email = endpoints.service_account(args.resource_type, args.props)
    except UnknownValueError:
        # Unknown at preview: an account this stack creates, so not a Google-managed default.
        return
    field = endpoints.ACCOUNT_FIELD[args.resource_type]
    if email is None:
        report(
            f"`{field}` is not set, so it runs as {endpoints.DEFAULT_ACCOUNT[args.resource_type]}, "
            "which is shared by the project and often holds Editor; set it to a service "
            "account created for this service.",
            None,
        )
        return
    kind = shared_account_kind(email)
    if kind:
        report(
            f"`{field}` is {kind} ({email}); run it as a dedicated service account that "
            "holds only the permissions this service needs.",
            None,
        )


dedicated_service_account = ResourceValidationPolicy(
    name="run-dedicated-service-account",
    description="Cloud Run services and functions (1st and 2nd gen) run as a dedicated "
    "service account.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_dedicated_service_account,
)

POLICIES = [no_public_invoker, invoker_iam_enabled, dedicated_service_account]
