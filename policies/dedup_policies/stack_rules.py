"""Rules that only make sense across resources: a job and the handler it calls,
the handler and its ledger.

Each one guards a way the dedup ledger silently stops deduplicating: a
request that outlives its lease, a record that expires while retries still
arrive, a ledger that is never cleaned up, a job that calls something the
stack does not control. The rules about the calls themselves (headers,
invokers, the runtime account) are in `caller_rules`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from dedup_policies import facts, stack_view, types
from dedup_policies.caller_rules import (
    accepted_by_handler,
    dedup_headers,
    runtime_account_not_shared,
)
from dedup_policies.facts import DEFAULT_ATTEMPT_DEADLINE_S, DEFAULT_DATABASE, TTL_FIELD
from dedup_policies.handler_settings import HandlerSettings
from dedup_policies.props import as_list, as_mapping, as_text, format_seconds, get_path
from dedup_policies.scheduler_job import (
    attempt_deadline_seconds,
    calls_google_api,
    retry_window_seconds,
)
from dedup_policies.stack_view import Handler, Job
from dedup_policies.unknowns import Deferred


def _each_dedup_handler(view: stack_view.StackView, check: Callable[[Handler], None]) -> None:
    """Run `check` on every dedup handler of the stack, each one deferred on its own.

    A value unknown during a preview then stops only the check that read it: the
    other handlers are still checked and their violations still reported.
    """
    with Deferred() as later:
        for handler in view.dedup_handlers():
            later.run(check, handler)


def _check_calls_handler(job: Job, report: ReportViolation) -> None:
    props = job.resource.props
    if get_path(props, "pubsubTarget") is not None:
        # Pub/Sub delivers at least once as well; the subscriber, not this stack, would
        # have to deduplicate, so this job's runs bypass the ledger.
        report(
            f"{job.label} publishes to Pub/Sub, so no ledger of this stack deduplicates its "
            "runs; give it an `http_target` on the dedup handler, or disable this policy if "
            "the subscriber deduplicates by itself.",
            job.resource.urn,
        )
    elif as_mapping(get_path(props, "httpTarget")) is None:
        report(
            f"{job.label} has no `http_target`; point it at the dedup handler deployed in "
            "this stack (App Engine targets bypass the ledger).",
            job.resource.urn,
        )
    elif job.handler is None and calls_google_api(get_path(props, "httpTarget")):
        # "Deduplicate job requests", Prevent duplicate requests to Google Cloud API
        # targets: the API ignores the X-CloudScheduler headers and starts a new run on
        # every retry; an idempotent proxy in front of it is the documented remedy.
        report(
            f"{job.label} calls the Google API {job.uri!r} directly, which starts a new run "
            "on every retry; call the dedup handler instead and let it start the API's work "
            "once per run (a `workflow` or `cloudRunJob` proxy target).",
            job.resource.urn,
        )
    elif job.handler is None:
        where = f"calls {job.uri!r}, which" if job.uri else "has a target URI that"
        report(
            f"{job.label} {where} is not a Cloud Run service or function of this stack; "
            "build `http_target.uri` from the handler's `uri`/`url` output so every job "
            "goes through a ledger this stack configures.",
            job.resource.urn,
        )


def _target_in_stack(args: StackValidationArgs, report: ReportViolation) -> None:
    with Deferred() as later:
        for job in stack_view.build(args.resources).jobs:
            later.run(_check_calls_handler, job, report)


target_in_stack = StackValidationPolicy(
    name="scheduler-target-in-stack",
    description="Every Cloud Scheduler job calls a Cloud Run service or function defined in "
    "the same stack.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_target_in_stack,
)


def _check_timeout(handler: Handler, job: Job, report: ReportViolation) -> None:
    timeout = handler.timeout_seconds()
    deadline = attempt_deadline_seconds(job.resource.props)
    deadline = DEFAULT_ATTEMPT_DEADLINE_S if deadline is None else deadline
    if timeout is not None and timeout < deadline:
        report(
            f"{handler.label} times out after {format_seconds(timeout)} but "
            f"{job.label} waits {format_seconds(deadline)} per attempt; raise the "
            f"request timeout to at least {format_seconds(deadline)} (or lower the "
            "job's attempt_deadline) so an attempt is not cut off while Scheduler "
            "still waits for it.",
            handler.resource.urn,
        )


def _timeout_covers_deadline(args: StackValidationArgs, report: ReportViolation) -> None:
    view = stack_view.build(args.resources)
    with Deferred() as later:
        for job in view.jobs:
            if job.handler is not None:
                later.run(_check_timeout, job.handler, job, report)


timeout_covers_deadline = StackValidationPolicy(
    name="run-timeout-covers-attempt-deadline",
    description="A handler's request timeout is at least the attempt deadline of every job "
    "that calls it.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_timeout_covers_deadline,
)


def _check_lease(handler: Handler, report: ReportViolation) -> None:
    settings = handler.settings()
    settings.require("DEDUP_LEASE_SECONDS")
    timeout = handler.timeout_seconds()
    if settings.lease_seconds is None:
        report(
            f"{handler.label} sets DEDUP_LEASE_SECONDS to something that is not a whole "
            "number of seconds; the handler will refuse to start.",
            handler.resource.urn,
        )
    elif timeout is not None and settings.lease_seconds < timeout:
        report(
            f"{handler.label} holds a run's lease for "
            f"{format_seconds(settings.lease_seconds)} but a request may run "
            f"{format_seconds(timeout)}; set DEDUP_LEASE_SECONDS to at least "
            f"{int(timeout)} so a retry cannot claim a run whose first attempt is still "
            "executing (Cloud Run does not stop code at the timeout).",
            handler.resource.urn,
        )
    _check_heartbeat(handler, settings, report)


def _check_heartbeat(handler: Handler, settings: HandlerSettings, report: ReportViolation) -> None:
    """The heartbeat lease a claim takes must survive a failed renewal and fit in the lease."""
    settings.require("DEDUP_HEARTBEAT_SECONDS")
    heartbeat = settings.heartbeat_seconds
    if heartbeat is None:
        return
    if heartbeat < facts.MIN_HEARTBEAT_S:
        report(
            f"{handler.label} sets DEDUP_HEARTBEAT_SECONDS to something shorter than "
            f"{facts.MIN_HEARTBEAT_S} s (or not a whole number); a live holder whose one "
            "renewal fails could lose its run, and the handler refuses to start.",
            handler.resource.urn,
        )
    elif settings.lease_seconds is not None and heartbeat > settings.lease_seconds:
        report(
            f"{handler.label} sets DEDUP_HEARTBEAT_SECONDS ({format_seconds(heartbeat)}) "
            f"longer than DEDUP_LEASE_SECONDS ({format_seconds(settings.lease_seconds)}); "
            "the handler refuses to start.",
            handler.resource.urn,
        )


def _lease_covers_timeout(args: StackValidationArgs, report: ReportViolation) -> None:
    _each_dedup_handler(stack_view.build(args.resources), partial(_check_lease, report=report))


lease_covers_timeout = StackValidationPolicy(
    name="lease-covers-request-timeout",
    description="The handler's lease lasts at least its request timeout, and its heartbeat "
    "lease survives a failed renewal and fits in it.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_lease_covers_timeout,
)


def _check_retention(view: stack_view.StackView, handler: Handler, report: ReportViolation) -> None:
    settings = handler.settings()
    settings.require("DEDUP_RETENTION_SECONDS", "DEDUP_LEASE_SECONDS")
    retention = settings.retention_seconds
    if retention is None:
        report(
            f"{handler.label} sets DEDUP_RETENTION_SECONDS to something that is not a "
            "whole number of seconds; the handler will refuse to start.",
            handler.resource.urn,
        )
        return
    if settings.lease_seconds is not None and retention <= settings.lease_seconds:
        report(
            f"{handler.label} keeps records {format_seconds(retention)}, not longer than "
            f"its {format_seconds(settings.lease_seconds)} lease; raise "
            "DEDUP_RETENTION_SECONDS above DEDUP_LEASE_SECONDS.",
            handler.resource.urn,
        )
    for job in view.jobs_calling(handler):
        window = retry_window_seconds(job.resource.props)
        if retention < window:
            report(
                f"{handler.label} keeps records {format_seconds(retention)} but retries "
                f"of {job.label} can arrive up to {format_seconds(window)} after the first "
                f"attempt; set DEDUP_RETENTION_SECONDS to at least {int(window) + 1} or "
                "tighten the job's retry_config, or a late retry runs the job twice.",
                handler.resource.urn,
            )


def _retention_covers_retries(args: StackValidationArgs, report: ReportViolation) -> None:
    view = stack_view.build(args.resources)
    _each_dedup_handler(view, partial(_check_retention, view, report=report))


retention_covers_retries = StackValidationPolicy(
    name="retention-covers-retry-window",
    description="Ledger records outlive the retry window of every job the handler serves.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_retention_covers_retries,
)


def _ttl_fields(args: StackValidationArgs, collection: str, database: str) -> list[PolicyResource]:
    found = []
    for resource in args.resources:
        if resource.resource_type != types.FIRESTORE_FIELD:
            continue
        props = resource.props
        field_database = as_text(get_path(props, "database")) or DEFAULT_DATABASE
        if (
            get_path(props, "collection") == collection
            and get_path(props, "field") == TTL_FIELD
            and field_database == database
            and as_mapping(get_path(props, "ttlConfig")) is not None
        ):
            found.append(resource)
    return found


def _check_ttl(args: StackValidationArgs, handler: Handler, report: ReportViolation) -> None:
    settings = handler.settings()
    settings.require("DEDUP_COLLECTION", "DEDUP_DATABASE")
    if not _ttl_fields(args, settings.collection, settings.database):
        report(
            f"{handler.label} writes its ledger to collection {settings.collection!r} in "
            f"database {settings.database!r}, but the stack has no TTL policy for it; add "
            f"gcp.firestore.Field(collection={settings.collection!r}, field={TTL_FIELD!r}, "
            f"database={settings.database!r}, ttl_config={{}}, index_config={{}}) or the "
            "ledger grows forever.",
            handler.resource.urn,
        )


def _ttl_policy(args: StackValidationArgs, report: ReportViolation) -> None:
    _each_dedup_handler(stack_view.build(args.resources), partial(_check_ttl, args, report=report))


ttl_policy = StackValidationPolicy(
    name="ledger-ttl-policy",
    description="The ledger collection the handler uses has a Firestore TTL policy on expire_at.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_ttl_policy,
)


def _check_ttl_index(args: StackValidationArgs, handler: Handler, report: ReportViolation) -> None:
    settings = handler.settings()
    settings.require("DEDUP_COLLECTION", "DEDUP_DATABASE")
    for field in _ttl_fields(args, settings.collection, settings.database):
        index_config = as_mapping(get_path(field.props, "indexConfig"))
        if index_config is None or as_list(get_path(index_config, "indexes")):
            report(
                f"The TTL field {TTL_FIELD!r} of {settings.collection!r} keeps single-field "
                "indexes; set `index_config={}` to exempt it, as Google recommends for "
                "TTL timestamps (sequential values create index hotspots).",
                field.urn,
            )


def _ttl_field_not_indexed(args: StackValidationArgs, report: ReportViolation) -> None:
    _each_dedup_handler(
        stack_view.build(args.resources), partial(_check_ttl_index, args, report=report)
    )


ttl_field_not_indexed = StackValidationPolicy(
    name="ledger-ttl-field-not-indexed",
    description="The ledger's TTL field is exempt from single-field indexes.",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=_ttl_field_not_indexed,
)


def _check_runtime(handler: Handler, report: ReportViolation) -> None:
    if handler.resource.resource_type != types.FUNCTION_V2:
        return  # a Cloud Run service is built from its image, not from a runtime id
    runtime = as_text(get_path(handler.resource.props, "buildConfig", "runtime"))
    problem = facts.python_runtime_problem(runtime) if runtime else ""
    if problem:
        report(f"{handler.label} builds on {problem}.", handler.resource.urn)


def _handler_runtime(args: StackValidationArgs, report: ReportViolation) -> None:
    _each_dedup_handler(stack_view.build(args.resources), partial(_check_runtime, report=report))


handler_runtime = StackValidationPolicy(
    name="handler-python-runtime",
    description="The dedup handler's function builds on a Python runtime its machinery runs "
    "on (3.11 or newer).",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_handler_runtime,
)


POLICIES = [
    target_in_stack,
    timeout_covers_deadline,
    lease_covers_timeout,
    retention_covers_retries,
    ttl_policy,
    ttl_field_not_indexed,
    handler_runtime,
    dedup_headers,
    accepted_by_handler,
    runtime_account_not_shared,
]
