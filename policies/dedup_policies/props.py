"""Reading wire-form resource properties the way the engine hands them over.

The engine gives policies camelCase keys at every level, numbers as floats,
and wraps mappings/lists in proxies that raise `UnknownValueError` when an
unknown (preview-time) value is read. These helpers never hide that error:
a rule that reads an unknown value must let the SDK turn it into its
standard "can't run during preview" advisory, exactly as under the engine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def as_mapping(value: Any) -> Mapping[str, Any] | None:
    """The value as a mapping, or None (the SDK proxies are Mappings, not dicts)."""
    return value if isinstance(value, Mapping) else None


def as_list(value: Any) -> list[Any]:
    """The value as a list; a missing or scalar value is an empty list."""
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [value[i] for i in range(len(value))]
    return []


def has_key(mapping: Mapping[str, Any], key: str) -> bool:
    """Key membership without reading the value (`in` on an SDK proxy reads it)."""
    return any(existing == key for existing in iter(mapping))


def get_path(props: Any, *path: str | int) -> Any:
    """props[a][b]… or None as soon as a step is missing.

    Lists of one element are common in pulumi-gcp (`statuses[0].url`); an int
    step indexes them.
    """
    current = props
    for step in path:
        if isinstance(step, int):
            items = as_list(current)
            if step >= len(items):
                return None
            current = items[step]
            continue
        mapping = as_mapping(current)
        if mapping is None or not has_key(mapping, step):
            return None
        current = mapping[step]
    return current


def as_text(value: Any) -> str | None:
    """A non-empty string, or None."""
    return value if isinstance(value, str) and value.strip() else None


def as_number(value: Any) -> float | None:
    """Numbers arrive as floats on the wire, strings from env vars; bools are not numbers."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def is_true(value: Any) -> bool:
    """Booleans, or the string "true" as annotations carry them."""
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def parse_duration(value: Any) -> float | None:
    """Seconds in a protobuf Duration string such as "320s" or "1.5s"; None if malformed."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        return float(match.group(1)) if match else None
    return None


def url_origin(url: str) -> str | None:
    """scheme://host[:port] of a URL, lower-cased, or None if it isn't an absolute URL."""
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def normalize_url(url: str) -> str:
    """A URL without query, fragment or trailing slash, with scheme and host lower-cased."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{path}"


def url_is_under(url: str, base: str) -> bool:
    """True when `url` is `base` or a path below it (same scheme and host)."""
    target, prefix = normalize_url(url), normalize_url(base)
    return url_origin(url) is not None and (target == prefix or target.startswith(prefix + "/"))


def format_seconds(seconds: float) -> str:
    """320 -> "320s"; keeps fractions only when present."""
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{seconds:g}s"
