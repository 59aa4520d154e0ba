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

from dedup_policies import handler_resource, types
from dedup_policies.accounts import shared_account_kind
from dedup_policies.iam_grants import PUBLIC_MEMBERS, grants


def _no_public_invoker(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in types.INVOKER_IAM_TYPES:
        return
    for role, member in grants(args.props):
        if member in PUBLIC_MEMBERS:
            report(
                f"{member} is granted {role or 'a role'} on the service; remove it and grant "
                "roles/run.invoker only to the Scheduler job's invoker service account.",
                None,
            )


no_public_invoker = ResourceValidationPolicy(
    name="run-no-public-invoker",
    description="Cloud Run services and functions are never invokable by allUsers or "
    "allAuthenticatedUsers.",
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
    if args.resource_type not in types.HANDLER_TYPES:
        return
    try:
        email = handler_resource.service_account(args.resource_type, args.props)
    except UnknownValueError:
        # Unknown at preview: an account this stack creates, so not a Google-managed default.
        return
    field = {
        types.FUNCTION_V2: "service_config.service_account_email",
        types.RUN_SERVICE_V2: "template.service_account",
        types.RUN_SERVICE_V1: "template.spec.service_account_name",
    }[args.resource_type]
    if email is None:
        report(
            f"Set `{field}` to a service account created for this handler; unset, it runs as "
            "the Compute Engine default account, which usually holds Editor on the project.",
            None,
        )
        return
    kind = shared_account_kind(email)
    if kind:
        report(
            f"`{field}` is {kind} ({email}); run the handler as a dedicated service account "
            "that holds only the ledger's Firestore permissions.",
            None,
        )


dedicated_service_account = ResourceValidationPolicy(
    name="run-dedicated-service-account",
    description="Cloud Run services and functions run as a dedicated service account.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_dedicated_service_account,
)

POLICIES = [no_public_invoker, invoker_iam_enabled, dedicated_service_account]
