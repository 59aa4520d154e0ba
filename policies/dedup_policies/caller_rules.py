"""Rules about the calls that reach the handler: the dedup headers each job sends,
the invoker and headers the handler admits, and a runtime account of its own.

Each guards a way a job's deliveries stop being deduplicated or stop running:
the handler keys runs by headers the job does not send, or refuses the job's
calls, or runs as an account another caller holds too.
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

from dedup_policies import handler_resource, stack_view
from dedup_policies.facts import JOB_SET_HEADERS
from dedup_policies.props import as_mapping, as_text, get_path
from dedup_policies.region_rules import regional_copies
from dedup_policies.stack_view import Handler, Job
from dedup_policies.unknowns import Deferred


def _header_value(headers: Mapping[str, Any], name: str) -> str | None:
    for key in headers:
        if str(key).lower() == name.lower():
            value = headers[key]
            return value if isinstance(value, str) and value.strip() else None
    return None


def _header_read_by(handler: Handler, which: str) -> tuple[str, str]:
    """The header the handler reads for `which` ("PROJECT" or "REGION"), and its variable."""
    settings = handler.settings()
    variable = f"DEDUP_{which}_HEADER"
    settings.require(variable)
    return (settings.project_header if which == "PROJECT" else settings.region_header), variable


def _check_header_sent(job: Job, handler: Handler, which: str, report: ReportViolation) -> None:
    header, variable = _header_read_by(handler, which)
    if header.lower() in JOB_SET_HEADERS:
        report(
            f"{variable} of {handler.label} is {header!r}, a header the job sets for its "
            f"body, not to its {'project id' if which == 'PROJECT' else 'region'}: the handler "
            "would refuse every delivery; choose another header name.",
            job.resource.urn,
        )
        return
    headers = as_mapping(get_path(job.resource.props, "httpTarget", "headers")) or {}
    if _header_value(headers, header) is None:
        report(
            f"Add the header {header!r} to `http_target.headers` of {job.label} with the "
            f"job's {'project id' if which == 'PROJECT' else 'region'}, or set {variable} of "
            f"{handler.label} to the header the job sends: Cloud Scheduler does not add it, "
            "and the handler refuses a delivery without it (400), since the dedup key needs "
            "it to tell apart jobs that share a JOB_ID across projects or regions.",
            job.resource.urn,
        )


def _dedup_headers(args: StackValidationArgs, report: ReportViolation) -> None:
    with Deferred() as later:
        for job in stack_view.build(args.resources).jobs:
            if job.handler is None:
                continue  # scheduler-target-in-stack reports a job without a handler
            later.run(_check_header_sent, job, job.handler, "PROJECT", report)
            later.run(_check_header_sent, job, job.handler, "REGION", report)


dedup_headers = StackValidationPolicy(
    name="scheduler-dedup-headers",
    description="Each job sends, non-empty, the project and region headers its handler "
    "reads (DEDUP_PROJECT_HEADER, DEDUP_REGION_HEADER) for the dedup key.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_dedup_headers,
)


def _check_header_allowed(job: Job, handler: Handler, which: str, report: ReportViolation) -> None:
    header, _ = _header_read_by(handler, which)
    headers = as_mapping(get_path(job.resource.props, "httpTarget", "headers")) or {}
    value = _header_value(headers, header)
    if value is None or header.lower() in JOB_SET_HEADERS:
        return  # scheduler-dedup-headers reports a header not sent, or one the job sets
    settings = handler.settings()
    allowed_var = f"DEDUP_ALLOWED_{which}S"
    settings.require(allowed_var)
    allowed = settings.allowed_projects if which == "PROJECT" else settings.allowed_regions
    if allowed and value not in allowed:
        report(
            f"{job.label} sends {header}: {value!r}, which {handler.label} rejects "
            f"({allowed_var}={','.join(sorted(allowed))}); fix the header "
            f"or add the value to {allowed_var}.",
            job.resource.urn,
        )


def _check_invoker(job: Job, handler: Handler, report: ReportViolation) -> None:
    settings = handler.settings()
    invoker = as_text(
        get_path(job.resource.props, "httpTarget", "oidcToken", "serviceAccountEmail")
    )
    if invoker is None:
        return  # scheduler-oidc-token reports a job without a token
    settings.require("DEDUP_ALLOWED_INVOKERS")
    allowed = settings.allowed_invokers
    if allowed and invoker not in allowed:
        report(
            f"{job.label} calls as {invoker}, which {handler.label} rejects "
            f"(DEDUP_ALLOWED_INVOKERS={','.join(sorted(allowed))}); add the account to "
            "DEDUP_ALLOWED_INVOKERS or use an allowed one.",
            job.resource.urn,
        )


def _accepted_by_handler(args: StackValidationArgs, report: ReportViolation) -> None:
    with Deferred() as later:
        for job in stack_view.build(args.resources).jobs:
            if job.handler is None:
                continue
            later.run(_check_header_allowed, job, job.handler, "PROJECT", report)
            later.run(_check_header_allowed, job, job.handler, "REGION", report)
            later.run(_check_invoker, job, job.handler, report)


accepted_by_handler = StackValidationPolicy(
    name="scheduler-accepted-by-handler",
    description="Each job's header values and identity are ones its handler's DEDUP_ALLOWED_* "
    "settings accept.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_accepted_by_handler,
)


def _add_runtime_account(handler: Handler, accounts: dict[str, list[Handler]]) -> None:
    email = handler_resource.service_account(handler.resource.resource_type, handler.resource.props)
    if email:
        accounts.setdefault(email.lower(), []).append(handler)


def _check_invoker_is_not_runtime(
    job: Job, accounts: dict[str, list[Handler]], report: ReportViolation
) -> None:
    invoker = as_text(
        get_path(job.resource.props, "httpTarget", "oidcToken", "serviceAccountEmail")
    )
    for handler in accounts.get((invoker or "").lower(), []):
        report(
            f"{job.label} calls as {invoker}, the runtime account of {handler.label}; use a "
            "separate invoker account, or any code running in the service can trigger runs.",
            job.resource.urn,
        )


def _runtime_account_not_shared(args: StackValidationArgs, report: ReportViolation) -> None:
    view = stack_view.build(args.resources)
    accounts: dict[str, list[Handler]] = {}
    with Deferred() as later:
        for handler in view.handlers:
            later.run(_add_runtime_account, handler, accounts)
        for email, handlers in accounts.items():
            # One schedule's handler in each of its regions is one handler, one grant.
            if len(handlers) > 1 and not regional_copies(handlers):
                names = ", ".join(h.label for h in handlers)
                for handler in handlers:
                    report(
                        f"{email} runs {names}; give each service its own runtime account so "
                        "the ledger's Firestore grant belongs to the handler alone.",
                        handler.resource.urn,
                    )
        for job in view.jobs:
            later.run(_check_invoker_is_not_runtime, job, accounts, report)


runtime_account_not_shared = StackValidationPolicy(
    name="run-runtime-account-not-shared",
    description="The handler's runtime service account is its own: not shared with another "
    "service and not the jobs' invoker account.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_runtime_account_not_shared,
)
