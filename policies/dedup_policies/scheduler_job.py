"""A Cloud Scheduler job's timing: attempt deadline, retry policy, retry window.

The ledger must keep a run's record for as long as a retry of that run can
still arrive, so the retry window is computed as an upper bound from the
job's own retry settings (Cloud Scheduler defaults where unset).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dedup_policies.props import as_number, get_path, parse_duration

DEFAULT_ATTEMPT_DEADLINE_SECONDS = 180.0
MIN_ATTEMPT_DEADLINE_SECONDS = 15.0
MAX_ATTEMPT_DEADLINE_SECONDS = 1800.0
MAX_RETRY_COUNT = 5


@dataclass(frozen=True)
class RetryPolicy:
    """retryConfig with Cloud Scheduler's defaults filled in (durations in seconds)."""

    retry_count: float = 0
    max_retry_duration: float = 0  # 0 = unlimited
    min_backoff: float = 5
    max_backoff: float = 3600
    max_doublings: float = 5

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> RetryPolicy:
        """Reads `retryConfig`; malformed values fall back to defaults (another rule flags them)."""
        defaults = cls()

        def number(key: str, default: float) -> float:
            value = as_number(get_path(props, "retryConfig", key))
            return default if value is None else value

        def duration(key: str, default: float) -> float:
            value = parse_duration(get_path(props, "retryConfig", key))
            return default if value is None else value

        return cls(
            retry_count=number("retryCount", defaults.retry_count),
            max_retry_duration=duration("maxRetryDuration", defaults.max_retry_duration),
            min_backoff=duration("minBackoffDuration", defaults.min_backoff),
            max_backoff=duration("maxBackoffDuration", defaults.max_backoff),
            max_doublings=number("maxDoublings", defaults.max_doublings),
        )

    def backoff(self, retry_index: int) -> float:
        """Wait before retry number `retry_index` (0-based).

        The interval doubles `max_doublings` times, then grows linearly by the
        last doubled interval, and never exceeds `max_backoff`.
        """
        doublings = max(0, int(self.max_doublings))
        if retry_index <= doublings:
            interval = self.min_backoff * 2**retry_index
        else:
            interval = self.min_backoff * 2**doublings * (retry_index - doublings + 1)
        return min(interval, self.max_backoff)


def attempt_deadline_seconds(props: Mapping[str, Any]) -> float | None:
    """The job's attemptDeadline in seconds; None when unset or malformed."""
    return parse_duration(get_path(props, "attemptDeadline"))


def retry_window_seconds(props: Mapping[str, Any]) -> float:
    """Upper bound on the time from a run's first attempt to the end of its last retry."""
    deadline = attempt_deadline_seconds(props) or DEFAULT_ATTEMPT_DEADLINE_SECONDS
    policy = RetryPolicy.from_props(props)
    retries = max(0, int(policy.retry_count))
    window = deadline * (retries + 1) + sum(policy.backoff(i) for i in range(retries))
    if policy.max_retry_duration > 0:
        # With both limits set, Cloud Scheduler retries until both are reached, and
        # a retry that starts just before max_retry_duration may run a full deadline.
        window = max(window, policy.max_retry_duration + deadline)
    return window
