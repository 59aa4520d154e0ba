"""The handler's DEDUP_* environment as the stack declares it.

The defaults are the handler's own, from the pack's copy of the shared facts
(the pack must not import the handler: it ships with only the Pulumi SDKs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pulumi_policy.proxy import UnknownValueError

from dedup_policies import facts


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
    # DEDUP_HEARTBEAT_SECONDS, the claim lease renewed while a job runs: None when unset
    # (the claim lease is then DEDUP_LEASE_SECONDS); -1 when set but not a whole number.
    heartbeat_seconds: float | None = None
    allowed_projects: frozenset[str] = frozenset()
    allowed_regions: frozenset[str] = frozenset()
    # DEDUP_KEY_REGION / DEDUP_REGIONS: the region every run key hashes and every region
    # the schedule runs in, for one schedule's handler in each of several regions.
    key_region: str = ""
    regions: frozenset[str] = frozenset()
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
            collection=text("DEDUP_COLLECTION", facts.DEFAULT_COLLECTION),
            database=text("DEDUP_DATABASE", facts.DEFAULT_DATABASE),
            lease_seconds=seconds("DEDUP_LEASE_SECONDS", facts.DEFAULT_LEASE_S),
            retention_seconds=seconds("DEDUP_RETENTION_SECONDS", facts.DEFAULT_RETENTION_S),
            project_header=text("DEDUP_PROJECT_HEADER", facts.DEFAULT_PROJECT_HEADER),
            region_header=text("DEDUP_REGION_HEADER", facts.DEFAULT_REGION_HEADER),
            allowed_invokers=names("DEDUP_ALLOWED_INVOKERS"),
            heartbeat_seconds=(
                None
                if "DEDUP_HEARTBEAT_SECONDS" not in env
                else seconds("DEDUP_HEARTBEAT_SECONDS", facts.HEARTBEAT_S) or -1.0
            ),
            allowed_projects=names("DEDUP_ALLOWED_PROJECTS"),
            allowed_regions=names("DEDUP_ALLOWED_REGIONS"),
            key_region=text("DEDUP_KEY_REGION", ""),
            regions=names("DEDUP_REGIONS"),
            unknown=dict(unknown or {}),
        )
