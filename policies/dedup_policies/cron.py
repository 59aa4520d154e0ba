"""Tell unix-cron schedules from groc ("every 5 minutes") ones.

Cloud Scheduler only guarantees the X-CloudScheduler-ScheduleTime header for
unix-cron jobs, and the handler's dedup key is built from it, so the pack
must reject anything else. The pack keeps its dependencies to the Pulumi SDKs,
hence this small checker instead of a cron library.
"""

from __future__ import annotations

import re

_MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
_DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]

# (name, lowest, highest, names for values starting at `lowest`)
_FIELDS: tuple[tuple[str, int, int, list[str]], ...] = (
    ("minute", 0, 59, []),
    ("hour", 0, 23, []),
    ("day of month", 1, 31, []),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)

_ITEM = re.compile(r"^(?P<range>\*|[0-9A-Za-z]+(?:-[0-9A-Za-z]+)?)(?:/(?P<step>\d+))?$")


def _value(token: str, low: int, high: int, names: list[str]) -> int | None:
    if token.isdigit():
        number = int(token)
        return number if low <= number <= high else None
    upper = token.upper()
    if upper in names:
        return names.index(upper) + low
    return None


def _check_field(text: str, name: str, low: int, high: int, names: list[str]) -> str | None:
    for item in text.split(","):
        match = _ITEM.match(item)
        if not match:
            return f"{name} field {text!r} is not unix-cron"
        step = match.group("step")
        if step is not None and int(step) == 0:
            return f"{name} field {text!r} has a zero step"
        part = match.group("range")
        if part == "*":
            continue
        bounds = [_value(token, low, high, names) for token in part.split("-")]
        if any(bound is None for bound in bounds):
            return f"{name} field {text!r} is outside {low}-{high}"
        if len(bounds) == 2 and bounds[0] > bounds[1]:  # type: ignore[operator]
            return f"{name} field {text!r} has a reversed range"
    return None


def unix_cron_problem(schedule: str) -> str | None:
    """None if `schedule` is a five-field unix-cron expression, else why it is not."""
    fields = schedule.split()
    if len(fields) != 5:
        return (
            f"{schedule!r} has {len(fields)} fields; unix-cron has exactly five "
            "(minute hour day-of-month month day-of-week) - groc phrases like "
            "'every 5 minutes' are not allowed"
        )
    for text, (name, low, high, names) in zip(fields, _FIELDS, strict=True):
        problem = _check_field(text, name, low, high, names)
        if problem:
            return problem
    return None
