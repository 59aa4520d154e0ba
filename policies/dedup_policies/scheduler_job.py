"""A Cloud Scheduler job's timing as its properties declare it: deadline and retry window.

The ledger must keep a run's record for as long as a retry of that run can
still arrive, so the retry window is computed as an upper bound from the
job's own retry settings (Cloud Scheduler defaults where unset), with the
same arithmetic the Pulumi program uses (`facts.RetryPolicy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pulumi_policy.proxy import UnknownValueError

from dedup_policies import facts
from dedup_policies.props import as_number, as_text, get_path, parse_duration


def retry_policy(props: Mapping[str, Any]) -> facts.RetryPolicy:
    """The job's `retryConfig`; malformed values fall back to defaults (another rule flags them).

    Counts are capped at what the platform does at most, so a wildly wrong value
    (reported by `scheduler-retry-limits`) cannot make the window arithmetic explode.
    """
    defaults = facts.RetryPolicy()

    def whole(key: str, default: int, cap: int) -> int:
        value = as_number(get_path(props, "retryConfig", key))
        return default if value is None or not value.is_integer() else min(int(value), cap)

    def duration(key: str, default: float) -> float:
        value = parse_duration(get_path(props, "retryConfig", key))
        return default if value is None else value

    # The provider never sends maxDoublings 0 (facts.DROPPED_MAX_DOUBLINGS): Scheduler's
    # default applies then.
    doublings = whole("maxDoublings", defaults.max_doublings, facts.MAX_DOUBLINGS)
    if doublings == facts.DROPPED_MAX_DOUBLINGS:
        doublings = defaults.max_doublings
    return facts.RetryPolicy(
        retry_count=whole("retryCount", defaults.retry_count, facts.MAX_RETRY_COUNT),
        max_retry_duration_s=duration("maxRetryDuration", defaults.max_retry_duration_s),
        min_backoff_s=duration("minBackoffDuration", defaults.min_backoff_s),
        max_backoff_s=duration("maxBackoffDuration", defaults.max_backoff_s),
        max_doublings=doublings,
    )


def attempt_deadline_seconds(props: Mapping[str, Any]) -> float | None:
    """The job's attemptDeadline in seconds; None when unset or malformed."""
    return parse_duration(get_path(props, "attemptDeadline"))


def retry_window_seconds(props: Mapping[str, Any]) -> float:
    """Upper bound on the time from a run's first attempt to the end of its last retry."""
    deadline = attempt_deadline_seconds(props) or facts.DEFAULT_ATTEMPT_DEADLINE_S
    return retry_policy(props).retry_window_s(deadline)


def calls_google_api(target: Any) -> bool:
    """True when the job calls a Google API (*.googleapis.com), which takes OAuth tokens.

    Cloud Scheduler OAuthToken: "This type of authorization should generally only be
    used when calling Google APIs hosted on *.googleapis.com"; OidcToken is for Cloud
    Run and endpoints that validate the token themselves. An unknown URI is another
    resource's URL (a new service), never a Google API literal.
    """
    try:
        uri = as_text(get_path(target, "uri"))
    except UnknownValueError:
        return False
    host = (urlsplit(uri).hostname or "") if uri else ""
    return host == "googleapis.com" or host.endswith(".googleapis.com")
