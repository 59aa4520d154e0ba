"""Rules on each Cloud Scheduler job, checked on its inputs before it is created.

They make sure every delivery can be deduplicated (unix-cron for the
ScheduleTime header; the project/region headers are checked against the
handler that reads them, in `stack_rules`), authenticated
(OIDC from a dedicated account, audience = the service) and bounded in time
(attempt deadline and retries within what the platform accepts).
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

from dedup_policies import types
from dedup_policies.accounts import shared_account_kind
from dedup_policies.config import schema, setting
from dedup_policies.facts import (
    DROPPED_MAX_DOUBLINGS,
    MAX_ATTEMPT_DEADLINE_S,
    MAX_RETRY_COUNT,
    MIN_ATTEMPT_DEADLINE_S,
    cron_meaning_problem,
    reserved_header_prefix,
    unix_cron_problem,
)
from dedup_policies.props import (
    as_mapping,
    as_number,
    as_text,
    format_seconds,
    get_path,
    parse_duration,
    url_is_under,
)
from dedup_policies.scheduler_job import attempt_deadline_seconds, calls_google_api


def _is_job(args: ResourceValidationArgs) -> bool:
    return args.resource_type == types.SCHEDULER_JOB


def _unix_cron(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not _is_job(args):
        return
    schedule = get_path(args.props, "schedule")
    if not isinstance(schedule, str) or not schedule.strip():
        report("Set `schedule` to a unix-cron expression such as '*/5 * * * *'.", None)
        return
    problem = unix_cron_problem(schedule)
    if problem:
        report(
            f"Schedule {problem}. Rewrite it in unix-cron, e.g. '*/5 * * * *': only unix-cron "
            "jobs are guaranteed the X-CloudScheduler-ScheduleTime header the dedup key needs.",
            None,
        )
        return
    # The same refusal the program makes at plan time and the handler at start-up.
    meaning = cron_meaning_problem(schedule)
    if meaning:
        report(f"Schedule {meaning}.", None)


unix_cron_schedule = ResourceValidationPolicy(
    name="scheduler-unix-cron-schedule",
    description="Cloud Scheduler jobs use a unix-cron schedule (not groc).",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_unix_cron,
)


def _attempt_deadline(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not _is_job(args):
        return
    if get_path(args.props, "pubsubTarget") is not None:
        # pulumi-gcp cloudscheduler.Job attempt_deadline: "For PubSub targets, this field
        # is ignored - setting it will introduce an unresolvable diff."
        if get_path(args.props, "attemptDeadline") is not None:
            report(
                "Remove `attempt_deadline`: Cloud Scheduler ignores it for Pub/Sub targets and "
                "the provider then shows a diff on every update.",
                None,
            )
        return
    low = float(setting(args, "minSeconds", MIN_ATTEMPT_DEADLINE_S))
    high = float(setting(args, "maxSeconds", MAX_ATTEMPT_DEADLINE_S))
    raw = get_path(args.props, "attemptDeadline")
    if raw is None:
        report(
            f'Set `attempt_deadline` explicitly (e.g. "320s", between {format_seconds(low)} and '
            f"{format_seconds(high)}) and align it with the handler's request timeout; the "
            "implicit 180s default is easy to overlook.",
            None,
        )
        return
    seconds = attempt_deadline_seconds(args.props)
    if seconds is None:
        report(f'`attempt_deadline` {raw!r} is not a duration such as "320s".', None)
    elif not low <= seconds <= high:
        report(
            f"`attempt_deadline` is {format_seconds(seconds)}; set it between "
            f"{format_seconds(low)} and {format_seconds(high)}.",
            None,
        )


attempt_deadline = ResourceValidationPolicy(
    name="scheduler-attempt-deadline",
    description="Cloud Scheduler jobs set an attempt deadline within 15s-30min.",
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=schema(
        minSeconds={
            "type": "number",
            "minimum": MIN_ATTEMPT_DEADLINE_S,
            "maximum": MAX_ATTEMPT_DEADLINE_S,
            "default": MIN_ATTEMPT_DEADLINE_S,
        },
        maxSeconds={
            "type": "number",
            "minimum": MIN_ATTEMPT_DEADLINE_S,
            "maximum": MAX_ATTEMPT_DEADLINE_S,
            "default": MAX_ATTEMPT_DEADLINE_S,
        },
    ),
    validate=_attempt_deadline,
)


def _google_api_token(target: Any, report: ReportViolation) -> None:
    if get_path(target, "oauthToken") is not None:
        return
    if get_path(target, "oidcToken") is not None:
        report(
            "Replace `http_target.oidc_token` with `http_target.oauth_token`: the job calls a "
            "Google API (*.googleapis.com), which takes OAuth access tokens, not OIDC tokens.",
            None,
        )
        return
    report(
        "Add `http_target.oauth_token` with `service_account_email` set to a dedicated service "
        "account: the job calls a Google API (*.googleapis.com), which needs an OAuth token.",
        None,
    )


def _oidc_token(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not _is_job(args):
        return
    target = as_mapping(get_path(args.props, "httpTarget"))
    if target is None:
        return  # not an HTTP job; scheduler-target-in-stack reports that
    if calls_google_api(target):
        _google_api_token(target, report)
        return
    if get_path(target, "oauthToken") is not None:
        report(
            "Replace `http_target.oauth_token` with `http_target.oidc_token`: OAuth tokens are "
            "for *.googleapis.com APIs and Cloud Run does not accept them.",
            None,
        )
        return
    try:
        email = as_text(get_path(target, "oidcToken", "serviceAccountEmail"))
    except UnknownValueError:
        # Unknown at preview: an account this stack creates, so not a Google-managed default.
        return
    if email is None:
        report(
            "Add `http_target.oidc_token` with `service_account_email` set to a dedicated "
            "invoker service account, so Cloud Run can authenticate the call.",
            None,
        )
        return
    kind = shared_account_kind(email)
    if kind:
        report(
            f"OIDC token is minted for {kind} ({email}); use a dedicated invoker service "
            "account created in this stack and grant it roles/run.invoker on the handler only.",
            None,
        )


oidc_token = ResourceValidationPolicy(
    name="scheduler-oidc-token",
    description="Cloud Scheduler HTTP targets authenticate with an OIDC token from a "
    "dedicated service account.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_oidc_token,
)


def _oidc_audience(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not _is_job(args):
        return
    target = as_mapping(get_path(args.props, "httpTarget"))
    if target is None or as_mapping(get_path(target, "oidcToken")) is None:
        return  # scheduler-oidc-token reports a missing token
    if calls_google_api(target):
        return  # scheduler-oidc-token asks for an OAuth token instead
    uri = as_text(get_path(target, "uri"))
    audience = as_text(get_path(target, "oidcToken", "audience"))
    if audience is None:
        report(
            "Set `http_target.oidc_token.audience` to the target service's URL (e.g. the "
            "service's `uri` output); left empty it defaults to the full target URI, "
            "path and query included, which stops matching once the job calls a path.",
            None,
        )
        return
    if uri is not None and not url_is_under(uri, audience):
        report(
            f"OIDC audience {audience!r} is not the URL of the service the job calls "
            f"({uri!r}); set the audience to that service's URL.",
            None,
        )


oidc_audience = ResourceValidationPolicy(
    name="scheduler-oidc-audience",
    description="Cloud Scheduler OIDC tokens name the target service's URL as audience.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_oidc_audience,
)


def _retry_limits(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not _is_job(args):
        return
    config = as_mapping(get_path(args.props, "retryConfig"))
    if config is None:
        return
    limit = int(setting(args, "maxRetryCount", MAX_RETRY_COUNT))
    count = as_number(get_path(config, "retryCount"))
    if get_path(config, "retryCount") is not None and (
        count is None or not count.is_integer() or not 0 <= count <= limit
    ):
        report(
            f"`retry_config.retry_count` is {get_path(config, 'retryCount')!r}; set a whole "
            f"number from 0 to {limit}.",
            None,
        )
    durations = {}
    for key, arg in (
        ("minBackoffDuration", "min_backoff_duration"),
        ("maxBackoffDuration", "max_backoff_duration"),
        ("maxRetryDuration", "max_retry_duration"),
    ):
        raw = get_path(config, key)
        if raw is None:
            continue
        durations[key] = parse_duration(raw)
        if durations[key] is None:
            report(f'`retry_config.{arg}` {raw!r} is not a duration such as "10s".', None)
    low, high = durations.get("minBackoffDuration"), durations.get("maxBackoffDuration")
    if low is not None and high is not None and low > high:
        report(
            "`retry_config.min_backoff_duration` is longer than `max_backoff_duration`; "
            "swap or fix them.",
            None,
        )
    doublings = get_path(config, "maxDoublings")
    value = as_number(doublings)
    if doublings is not None and (value is None or not value.is_integer() or value < 0):
        report(f"`retry_config.max_doublings` is {doublings!r}; set a whole number >= 0.", None)
    elif value == DROPPED_MAX_DOUBLINGS:
        report(
            "`retry_config.max_doublings` is 0, which the provider drops (a zero retry field "
            "is never sent), so Cloud Scheduler doubles 5 times; set 1 or more, or leave it out.",
            None,
        )


retry_limits = ResourceValidationPolicy(
    name="scheduler-retry-limits",
    description="Cloud Scheduler retry settings stay within the platform's limits.",
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=schema(
        maxRetryCount={
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_RETRY_COUNT,
            "default": MAX_RETRY_COUNT,
        },
    ),
    validate=_retry_limits,
)


def _reserved_headers(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not _is_job(args):
        return
    headers = as_mapping(get_path(args.props, "httpTarget", "headers")) or {}
    for name in sorted(str(key) for key in headers):
        prefix = reserved_header_prefix(name)
        if prefix is not None:
            report(
                f"Header {name!r} begins with {prefix!r}, which Cloud Scheduler reserves for "
                "Google in any case (target.proto): deliveries would arrive without it. "
                "Rename the header (and the handler's DEDUP_*_HEADER that reads it).",
                None,
            )


reserved_headers = ResourceValidationPolicy(
    name="scheduler-reserved-headers",
    description="Jobs send no header named X-Google-* or X-AppEngine-* (any case): Cloud "
    "Scheduler reserves them.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_reserved_headers,
)

POLICIES = [
    unix_cron_schedule,
    reserved_headers,
    attempt_deadline,
    oidc_token,
    oidc_audience,
    retry_limits,
]
