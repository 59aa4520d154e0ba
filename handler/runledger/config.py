"""DEDUP_* settings, read and checked once at start-up.

A bad value stops the handler from starting with a message that names the
variable, instead of surfacing later as a failed delivery.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from runledger import facts
from runledger.exceptions import ConfigError


class ManualRuns(StrEnum):
    """DEDUP_MANUAL_RUNS, one member per mode in `facts.MANUAL_RUN_MODES`."""

    # A forced run gets its own key: the real run at that time still happens.
    SEPARATE = "separate"
    # A forced run is refused with 403.
    REJECT = "reject"


_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class Settings:
    collection: str
    database: str
    lease: timedelta
    retention: timedelta
    project_header: str
    region_header: str
    manual_runs: ManualRuns
    jobs_module: str
    allowed_invokers: frozenset[str]
    allowed_projects: frozenset[str]
    allowed_regions: frozenset[str]
    # DEDUP_DUPLICATE_WAIT_SECONDS: the longest an in-progress duplicate waits for
    # the holder's outcome (see runledger.delivery.duplicate_wait); None: as long as
    # the job's attempt deadline allows; zero: answer 409 at once.
    duplicate_wait: timedelta | None
    # DEDUP_HEARTBEAT_SECONDS: the lease a claim takes and every renewal extends by
    # (see runledger.ledger.lease); None: DEDUP_LEASE_SECONDS. DEDUP_LEASE_SECONDS still
    # bounds how long one request can keep a run, the request timeout plus a margin.
    heartbeat: timedelta | None = None
    # DEDUP_ALLOWED_INVOKER_IDS: the invoker accounts' unique ids, matched against an
    # ID token's `sub` claim as DEDUP_ALLOWED_INVOKERS is against `email`
    # (runledger.delivery.invoker).
    allowed_invoker_ids: frozenset[str] = frozenset()

    @property
    def claim_lease(self) -> timedelta:
        """The lease a claim takes and each renewal grants."""
        return self.lease if self.heartbeat is None else self.heartbeat

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        def text(name: str, default: str, pattern: re.Pattern[str], what: str) -> str:
            value = env.get(name, default).strip()
            if not pattern.fullmatch(value):
                raise ConfigError(f"{name}: {value!r} is not {what}")
            return value

        def seconds(name: str, default: int) -> timedelta:
            raw = env.get(name, str(default)).strip()
            if not raw.isdigit() or int(raw) <= 0:
                raise ConfigError(f"{name}: {raw!r} is not a positive whole number of seconds")
            return timedelta(seconds=int(raw))

        def wait_cap() -> timedelta | None:
            raw = env.get("DEDUP_DUPLICATE_WAIT_SECONDS", "").strip()
            if not raw:
                return None
            try:
                value = float(raw)
            except ValueError:
                value = -1.0
            if not 0 <= value <= facts.MAX_ATTEMPT_DEADLINE_S:
                raise ConfigError(
                    f"DEDUP_DUPLICATE_WAIT_SECONDS: {raw!r} is not a number of seconds from 0 "
                    f"(no wait) to {facts.MAX_ATTEMPT_DEADLINE_S}"
                )
            return timedelta(seconds=value)

        def heartbeat() -> timedelta | None:
            if not env.get("DEDUP_HEARTBEAT_SECONDS", "").strip():
                return None
            value = seconds("DEDUP_HEARTBEAT_SECONDS", facts.HEARTBEAT_S)
            if value < timedelta(seconds=facts.MIN_HEARTBEAT_S):
                raise ConfigError(
                    f"DEDUP_HEARTBEAT_SECONDS: {int(value.total_seconds())} is shorter than "
                    f"{facts.MIN_HEARTBEAT_S} s, too short for a renewal to survive one "
                    "failed store call"
                )
            return value

        def names(name: str) -> frozenset[str]:
            return frozenset(item.strip() for item in env.get(name, "").split(",") if item.strip())

        def database() -> str:
            value = env.get("DEDUP_DATABASE", facts.DEFAULT_DATABASE).strip()
            if not facts.is_database_id(value):
                raise ConfigError(
                    f"DEDUP_DATABASE: {value!r} is not a Firestore database id "
                    f"({facts.DATABASE_ID_RULE})"
                )
            return value

        manual = env.get("DEDUP_MANUAL_RUNS", ManualRuns.SEPARATE.value).strip()
        if manual not in facts.MANUAL_RUN_MODES:
            choices = ", ".join(facts.MANUAL_RUN_MODES)
            raise ConfigError(f"DEDUP_MANUAL_RUNS: {manual!r} is not one of {choices}")
        header = "an HTTP header name"
        settings = cls(
            collection=text(
                "DEDUP_COLLECTION",
                facts.DEFAULT_COLLECTION,
                facts.COLLECTION_ID,
                "a Firestore collection id",
            ),
            database=database(),
            lease=seconds("DEDUP_LEASE_SECONDS", facts.DEFAULT_LEASE_S),
            retention=seconds("DEDUP_RETENTION_SECONDS", facts.DEFAULT_RETENTION_S),
            project_header=text(
                "DEDUP_PROJECT_HEADER", facts.DEFAULT_PROJECT_HEADER, facts.HEADER_NAME, header
            ),
            region_header=text(
                "DEDUP_REGION_HEADER", facts.DEFAULT_REGION_HEADER, facts.HEADER_NAME, header
            ),
            manual_runs=ManualRuns(manual),
            jobs_module=text(
                "DEDUP_JOBS_MODULE", facts.DEFAULT_JOBS_MODULE, _MODULE, "a Python module name"
            ),
            allowed_invokers=names("DEDUP_ALLOWED_INVOKERS"),
            allowed_projects=names("DEDUP_ALLOWED_PROJECTS"),
            allowed_regions=names("DEDUP_ALLOWED_REGIONS"),
            duplicate_wait=wait_cap(),
            heartbeat=heartbeat(),
            allowed_invoker_ids=names("DEDUP_ALLOWED_INVOKER_IDS"),
        )
        if settings.retention <= settings.lease:
            raise ConfigError(
                "DEDUP_RETENTION_SECONDS: must be longer than DEDUP_LEASE_SECONDS, "
                "or a record could expire while its lease is live"
            )
        if settings.heartbeat is not None and settings.heartbeat > settings.lease:
            raise ConfigError(
                "DEDUP_HEARTBEAT_SECONDS: must not be longer than DEDUP_LEASE_SECONDS, "
                "which bounds how long one request holds a run"
            )
        if settings.project_header.lower() == settings.region_header.lower():
            raise ConfigError("DEDUP_REGION_HEADER: must differ from DEDUP_PROJECT_HEADER")
        return settings
