"""The handler's DEDUP_* environment as the stack declares it.

The defaults mirror `handler/runledger/config.py` (the pack must not import
the handler: it ships with only the Pulumi SDKs). If the handler's defaults
change, change them here too; the pack's tests pin both to the same values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pulumi_policy.proxy import UnknownValueError

DEFAULT_COLLECTION = "scheduler_runs"
DEFAULT_DATABASE = "(default)"
DEFAULT_LEASE_SECONDS = 360
DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600
DEFAULT_PROJECT_HEADER = "X-Dedup-Project"
DEFAULT_REGION_HEADER = "X-Dedup-Region"


@dataclass(frozen=True)
class HandlerSettings:
    """What the handler will use at run time, defaults filled in."""

    collection: str
    database: str
    lease_seconds: float | None  # None: set but not a number (the handler refuses to start)
    retention_seconds: float | None
    project_header: str
    region_header: str
    allowed_invokers: frozenset[str] = frozenset()  # empty: any caller Cloud Run admits
    allowed_projects: frozenset[str] = frozenset()
    allowed_regions: frozenset[str] = frozenset()
    # Variables whose value is unknown until deploy (preview); their field holds the default.
    unknown: Mapping[str, UnknownValueError] = field(default_factory=dict, compare=False)

    def require(self, *names: str) -> None:
        """Raise the SDK's UnknownValueError if any of these variables is not known yet."""
        for name in names:
            if name in self.unknown:
                raise self.unknown[name]

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], unknown: Mapping[str, UnknownValueError] | None = None
    ) -> HandlerSettings:
        def text(name: str, default: str) -> str:
            value = env.get(name)
            return value.strip() if isinstance(value, str) and value.strip() else default

        def seconds(name: str, default: int) -> float | None:
            # The handler accepts only a positive whole number of seconds.
            if name not in env:
                return float(default)
            raw = env[name].strip()
            return float(raw) if raw.isdigit() and int(raw) > 0 else None

        def names(name: str) -> frozenset[str]:
            items = env.get(name, "").split(",")
            return frozenset(item.strip() for item in items if item.strip())

        return cls(
            collection=text("DEDUP_COLLECTION", DEFAULT_COLLECTION),
            database=text("DEDUP_DATABASE", DEFAULT_DATABASE),
            lease_seconds=seconds("DEDUP_LEASE_SECONDS", DEFAULT_LEASE_SECONDS),
            retention_seconds=seconds("DEDUP_RETENTION_SECONDS", DEFAULT_RETENTION_SECONDS),
            project_header=text("DEDUP_PROJECT_HEADER", DEFAULT_PROJECT_HEADER),
            region_header=text("DEDUP_REGION_HEADER", DEFAULT_REGION_HEADER),
            allowed_invokers=names("DEDUP_ALLOWED_INVOKERS"),
            allowed_projects=names("DEDUP_ALLOWED_PROJECTS"),
            allowed_regions=names("DEDUP_ALLOWED_REGIONS"),
            unknown=dict(unknown or {}),
        )
