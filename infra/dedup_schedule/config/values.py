"""Typed access to one object of a stack's config, with errors that name the full key.

Values may arrive structured (a YAML map or list in `Pulumi.<stack>.yaml`) or as
the strings the Pulumi CLI stores (`pulumi config set maxInstances 5`, JSON text
for objects), so scalars are parsed leniently but checked strictly. Every error
is a single `ConfigError` whose message starts with the full key, for example
`scheduler-dedup:jobs[1].schedule: ...`.
"""

from __future__ import annotations

import difflib
import json
import re
import zoneinfo
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dedup_schedule.config.model import ConfigError

_DURATION = re.compile(r"(\d+)\s*(s|m|h)?")
# Value shapes more than one part of the config checks (the platform keys, job targets).
PROJECT_ID = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")
REGION = re.compile(r"[a-z]+-[a-z]+\d+")
ANY_TEXT = re.compile(r".+", re.DOTALL)


class ConfigValues:
    """One config object (the project's keys, a job, its retry policy, ...) at `path`.

    Unknown keys are rejected up front, naming the known ones, so a typo never
    silently falls back to a default.
    """

    def __init__(
        self,
        values: Mapping[str, Any],
        path: str,
        known: frozenset[str],
        beside: Iterable[str] = (),
    ) -> None:
        """`beside`: keys under `path` that another reader takes (the provider's `gcp:` keys),
        named when a required key is missing and one of them is a likely misspelling of it."""
        self.values = values
        self.path = path
        self.beside = tuple(beside)
        for key in values:
            if key not in known:
                hint = ", ".join(sorted(known))
                raise ConfigError(
                    f"{self.key(key)}: unknown key{did_you_mean(str(key), known)} "
                    f"(known keys: {hint})"
                )

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path.endswith("]") else f"{self.path}{name}"

    def raw(self, name: str) -> Any:
        value = self.values.get(name)
        return None if value == "" else value

    def text(
        self,
        name: str,
        default: str | None,
        valid: re.Pattern[str] | Callable[[str], bool],
        what: str,
    ) -> str:
        """A string matching `valid` (a pattern, matched in full, or a predicate)."""
        value = self.raw(name)
        if value is None:
            if default is None:
                raise ConfigError(
                    f"{self.key(name)}: required, expected {what}{self._set_instead(name)}"
                )
            value = default
        if not isinstance(value, str) or not _accepts(valid, value):
            raise ConfigError(f"{self.key(name)}: {value!r} is not {what}")
        return value

    def _set_instead(self, name: str) -> str:
        """'; the stack sets 'gcp:regoin': did you mean 'gcp:region'?' for a close key beside."""
        present = closest(name, self.beside)
        if present is None:
            return ""
        return f"; the stack sets {self.key(present)!r}: did you mean {self.key(name)!r}?"

    def optional_text(self, name: str) -> str | None:
        value = self.raw(name)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{self.key(name)}: {value!r} is not a string")
        return value

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        value = self.raw(name)
        if value is None:
            return default
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            value = int(value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{self.key(name)}: {value!r} is not a whole number")
        if not low <= value <= high:
            raise ConfigError(f"{self.key(name)}: {value} is outside the allowed {low}..{high}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.raw(name)
        if value is None:
            return default
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        if not isinstance(value, bool):
            raise ConfigError(f"{self.key(name)}: {value!r} is not true or false")
        return value

    def duration(self, name: str, default: int | None) -> int:
        """Whole seconds from '180s', '5m', '1h' or a bare number of seconds."""
        value = self.raw(name)
        if value is None:
            if default is None:
                raise ConfigError(f"{self.key(name)}: required, expected a duration like '180s'")
            return default
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        match = _DURATION.fullmatch(value.strip()) if isinstance(value, str) else None
        if match is None:
            raise ConfigError(
                f"{self.key(name)}: {value!r} is not a duration; use whole seconds, "
                "minutes or hours such as '180s', '5m' or '1h'"
            )
        return int(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2] or "s"]

    def time_zone(self, name: str) -> str:
        """A tz database zone name, 'UTC' when absent."""
        value = self.text(name, "UTC", re.compile(r"[A-Za-z0-9_+\-/]+"), "a tz database name")
        zones = zoneinfo.available_timezones()
        known = value in zones if zones else _loads_zone(value)
        if not known:
            raise ConfigError(
                f"{self.key(name)}: {value!r} is not a tz database time zone"
                f"{did_you_mean(value, zones)} (such as 'UTC', 'Europe/Berlin' or "
                "'America/New_York')"
            )
        return value

    def structured(self, name: str, expected: type) -> Any:
        """A map or list, given either structured or as JSON text (as `pulumi config` stores it)."""
        value = self.raw(name)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{self.key(name)}: not valid JSON ({exc.msg})") from None
        if value is not None and not isinstance(value, expected):
            kind = "a list" if expected is list else "an object"
            raise ConfigError(f"{self.key(name)}: expected {kind}, got {value!r}")
        return value


def closest(given: str, choices: Iterable[str]) -> str | None:
    """The choice closest to `given` (case aside), or None when none is close."""
    by_folded = {choice.casefold(): choice for choice in choices}
    close = difflib.get_close_matches(given.casefold(), by_folded, n=1, cutoff=0.6)
    return by_folded[close[0]] if close else None


def did_you_mean(given: str, choices: Iterable[str]) -> str:
    """'; did you mean X?' for the closest choice (case aside), or '' when none is close."""
    match = closest(given, choices)
    return f"; did you mean {match!r}?" if match is not None else ""


def _accepts(valid: re.Pattern[str] | Callable[[str], bool], value: str) -> bool:
    if isinstance(valid, re.Pattern):
        return valid.fullmatch(value) is not None
    return valid(value)


def _loads_zone(name: str) -> bool:
    """Whether `name` loads as a zone, for systems that cannot list their zones."""
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return True
