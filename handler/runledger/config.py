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

# The environment contract (stable names: the stack writes them, the policy pack
# checks its tested copy): `Settings.from_env` is their reader, `Settings.to_env`
# their one writer; the Pulumi program, the demo and the benchmarks use these names.
COLLECTION_ENV = "DEDUP_COLLECTION"
DATABASE_ENV = "DEDUP_DATABASE"
LEASE_ENV = "DEDUP_LEASE_SECONDS"
RETENTION_ENV = "DEDUP_RETENTION_SECONDS"
HEARTBEAT_ENV = "DEDUP_HEARTBEAT_SECONDS"
PROJECT_HEADER_ENV = "DEDUP_PROJECT_HEADER"
REGION_HEADER_ENV = "DEDUP_REGION_HEADER"
MANUAL_RUNS_ENV = "DEDUP_MANUAL_RUNS"
JOBS_MODULE_ENV = "DEDUP_JOBS_MODULE"
ALLOWED_INVOKERS_ENV = "DEDUP_ALLOWED_INVOKERS"
ALLOWED_INVOKER_IDS_ENV = "DEDUP_ALLOWED_INVOKER_IDS"
ALLOWED_PROJECTS_ENV = "DEDUP_ALLOWED_PROJECTS"
ALLOWED_REGIONS_ENV = "DEDUP_ALLOWED_REGIONS"
KEY_REGION_ENV = "DEDUP_KEY_REGION"
REGIONS_ENV = "DEDUP_REGIONS"
DUPLICATE_WAIT_ENV = "DEDUP_DUPLICATE_WAIT_SECONDS"
CONTRACT_ENV = "DEDUP_CONTRACT_VERSION"
DEAD_LETTER_TOPIC_ENV = "DEDUP_DEAD_LETTER_TOPIC"
# A Pub/Sub topic's full name: a project id, then a topic id (3-255 characters from a
# letter: letters, digits, - . _ ~ + %, not starting "goog"; Pub/Sub "Resource names").
DEAD_LETTER_TOPIC = re.compile(
    r"projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/topics/(?!goog)[A-Za-z][A-Za-z0-9._~+%-]{2,254}"
)


def contract_env() -> dict[str, str]:
    """The contract version as the program sets it on the function (`facts.CONTRACT_VERSION`)."""
    return {CONTRACT_ENV: str(facts.CONTRACT_VERSION)}


def check_contract(env: Mapping[str, str]) -> None:
    """Refuse an environment written by a program of another contract version, or by none.

    Such a program writes variables this handler reads differently (or not at all), so
    starting would run jobs by settings nobody chose: one line names both versions.
    """
    raw = env.get(CONTRACT_ENV, "").strip()
    if raw != str(facts.CONTRACT_VERSION):
        deployed = f"contract {raw!r}" if raw else "no contract version (an older program)"
        raise ConfigError(
            f"{CONTRACT_ENV}: this handler speaks contract {facts.CONTRACT_VERSION}, but the "
            f"program that deployed it set {deployed}; deploy the program and the handler "
            "from one scheduler-dedup version"
        )


class ManualRuns(StrEnum):
    """DEDUP_MANUAL_RUNS, one member per mode in `facts.MANUAL_RUN_MODES`."""

    # A forced run gets its own key: the real run at that time still happens.
    SEPARATE = "separate"
    # A forced run is refused with 403.
    REJECT = "reject"


# No duration setting means more than this (a century): a larger one would overflow the
# ledger's date arithmetic instead of being refused here.
MAX_SETTING_S = 100 * 365 * 86400


def positive_seconds(name: str, raw: str) -> timedelta:
    """A DEDUP_*_SECONDS value: a positive whole number of seconds, at most a century."""
    if not (raw.isascii() and raw.isdigit()) or not int(raw):
        raise ConfigError(f"{name}: {raw!r} is not a positive whole number of seconds")
    if int(raw) > MAX_SETTING_S:
        raise ConfigError(f"{name}: {raw!r} is more than {MAX_SETTING_S} seconds (a century)")
    return timedelta(seconds=int(raw))


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
    # DEDUP_KEY_REGION: the region every run key (and every slot, epoch, watermark and
    # backfill queue key) hashes, whichever region delivered: the stack's first region
    # when it runs in several. None: the delivering region's own (one region).
    key_region: str | None = None
    # DEDUP_REGIONS: every region the schedule runs in, whose Scheduler the audit lists.
    regions: frozenset[str] = frozenset()
    # DEDUP_DEAD_LETTER_TOPIC: the Pub/Sub topic each final failure is published to
    # (`runledger.delivery.dead_letter`); None: none is pushed.
    dead_letter_topic: str | None = None

    def to_env(self) -> dict[str, str]:
        """These settings as the environment `from_env` reads back: the contract's one writer.

        An optional setting left unset (no heartbeat, no duplicate-wait cap, no
        invoker allow-list) is left out, which is how `from_env` reads it.
        """
        env = {
            **contract_env(),
            COLLECTION_ENV: self.collection,
            DATABASE_ENV: self.database,
            LEASE_ENV: _seconds_text(self.lease),
            **({} if self.heartbeat is None else {HEARTBEAT_ENV: _seconds_text(self.heartbeat)}),
            RETENTION_ENV: _seconds_text(self.retention),
            PROJECT_HEADER_ENV: self.project_header,
            REGION_HEADER_ENV: self.region_header,
            MANUAL_RUNS_ENV: self.manual_runs.value,
            JOBS_MODULE_ENV: self.jobs_module,
            ALLOWED_PROJECTS_ENV: _names_text(self.allowed_projects),
            ALLOWED_REGIONS_ENV: _names_text(self.allowed_regions),
        }
        if self.allowed_invokers:
            env[ALLOWED_INVOKERS_ENV] = _names_text(self.allowed_invokers)
        if self.allowed_invoker_ids:
            env[ALLOWED_INVOKER_IDS_ENV] = _names_text(self.allowed_invoker_ids)
        if self.duplicate_wait is not None:
            env[DUPLICATE_WAIT_ENV] = _seconds_text(self.duplicate_wait)
        if self.key_region is not None:
            env[KEY_REGION_ENV] = self.key_region
            env[REGIONS_ENV] = _names_text(self.regions)
        if self.dead_letter_topic is not None:
            env[DEAD_LETTER_TOPIC_ENV] = self.dead_letter_topic
        return env

    def keyed_region(self, delivered: str) -> str:
        """The region a run delivered from `delivered` is keyed by (`key_region`, if set)."""
        return delivered if self.key_region is None else self.key_region

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
            return positive_seconds(name, env.get(name, str(default)).strip())

        def wait_cap() -> timedelta | None:
            raw = env.get(DUPLICATE_WAIT_ENV, "").strip()
            if not raw:
                return None
            try:
                value = float(raw)
            except ValueError:
                value = -1.0
            if not 0 <= value <= facts.MAX_ATTEMPT_DEADLINE_S:
                raise ConfigError(
                    f"{DUPLICATE_WAIT_ENV}: {raw!r} is not a number of seconds from 0 "
                    f"(no wait) to {facts.MAX_ATTEMPT_DEADLINE_S}"
                )
            return timedelta(seconds=value)

        def heartbeat() -> timedelta | None:
            if not env.get(HEARTBEAT_ENV, "").strip():
                return None
            value = seconds(HEARTBEAT_ENV, facts.HEARTBEAT_S)
            if value < timedelta(seconds=facts.MIN_HEARTBEAT_S):
                raise ConfigError(
                    f"{HEARTBEAT_ENV}: {int(value.total_seconds())} is shorter than "
                    f"{facts.MIN_HEARTBEAT_S} s, too short for a renewal to survive one "
                    "failed store call"
                )
            return value

        def names(name: str) -> frozenset[str]:
            return frozenset(item.strip() for item in env.get(name, "").split(",") if item.strip())

        def database() -> str:
            value = env.get(DATABASE_ENV, facts.DEFAULT_DATABASE).strip()
            if not facts.is_database_id(value):
                raise ConfigError(
                    f"{DATABASE_ENV}: {value!r} is not a Firestore database id "
                    f"({facts.DATABASE_ID_RULE})"
                )
            return value

        def dead_letter_topic() -> str | None:
            value = env.get(DEAD_LETTER_TOPIC_ENV, "").strip()
            if value and not DEAD_LETTER_TOPIC.fullmatch(value):
                raise ConfigError(
                    f"{DEAD_LETTER_TOPIC_ENV}: {value!r} is not a Pub/Sub topic name "
                    "(projects/PROJECT/topics/TOPIC)"
                )
            return value or None

        manual = env.get(MANUAL_RUNS_ENV, ManualRuns.SEPARATE.value).strip()
        if manual not in facts.MANUAL_RUN_MODES:
            choices = ", ".join(facts.MANUAL_RUN_MODES)
            raise ConfigError(f"{MANUAL_RUNS_ENV}: {manual!r} is not one of {choices}")
        header = "an HTTP header name"
        settings = cls(
            collection=text(
                COLLECTION_ENV,
                facts.DEFAULT_COLLECTION,
                facts.COLLECTION_ID,
                "a Firestore collection id",
            ),
            database=database(),
            lease=seconds(LEASE_ENV, facts.DEFAULT_LEASE_S),
            retention=seconds(RETENTION_ENV, facts.DEFAULT_RETENTION_S),
            project_header=text(
                PROJECT_HEADER_ENV, facts.DEFAULT_PROJECT_HEADER, facts.HEADER_NAME, header
            ),
            region_header=text(
                REGION_HEADER_ENV, facts.DEFAULT_REGION_HEADER, facts.HEADER_NAME, header
            ),
            manual_runs=ManualRuns(manual),
            jobs_module=text(
                JOBS_MODULE_ENV, facts.DEFAULT_JOBS_MODULE, _MODULE, "a Python module name"
            ),
            allowed_invokers=names(ALLOWED_INVOKERS_ENV),
            allowed_projects=names(ALLOWED_PROJECTS_ENV),
            allowed_regions=names(ALLOWED_REGIONS_ENV),
            duplicate_wait=wait_cap(),
            heartbeat=heartbeat(),
            allowed_invoker_ids=names(ALLOWED_INVOKER_IDS_ENV),
            key_region=env.get(KEY_REGION_ENV, "").strip() or None,
            regions=names(REGIONS_ENV),
            dead_letter_topic=dead_letter_topic(),
        )
        _check_regions(settings)
        if settings.retention <= settings.lease:
            raise ConfigError(
                f"{RETENTION_ENV}: must be longer than DEDUP_LEASE_SECONDS, "
                "or a record could expire while its lease is live"
            )
        if settings.heartbeat is not None and settings.heartbeat > settings.lease:
            raise ConfigError(
                f"{HEARTBEAT_ENV}: must not be longer than DEDUP_LEASE_SECONDS, "
                "which bounds how long one request holds a run"
            )
        if settings.project_header.lower() == settings.region_header.lower():
            raise ConfigError(f"{REGION_HEADER_ENV}: must differ from DEDUP_PROJECT_HEADER")
        return settings


def _check_regions(settings: Settings) -> None:
    """A schedule in several regions names its key region among them, and serves only those.

    Two regions keyed differently would each run every time once: the run's
    exactly-once rests on every region hashing the same key region.
    """
    if settings.key_region is None:
        if settings.regions:
            raise ConfigError(f"{REGIONS_ENV}: set only with {KEY_REGION_ENV}")
        return
    if settings.key_region not in settings.regions:
        shown = ", ".join(sorted(settings.regions)) or "unset"
        raise ConfigError(
            f"{KEY_REGION_ENV}: {settings.key_region!r} is not one of {REGIONS_ENV} ({shown})"
        )
    outside = sorted(settings.allowed_regions - settings.regions)
    if not settings.allowed_regions or outside:
        raise ConfigError(
            f"{ALLOWED_REGIONS_ENV}: with {KEY_REGION_ENV} set, name only regions of "
            f"{REGIONS_ENV}" + (f" (not: {', '.join(outside)})" if outside else "")
        )


def _seconds_text(value: timedelta) -> str:
    """Seconds as `from_env` reads them: whole seconds without a fraction."""
    seconds = value.total_seconds()
    return str(int(seconds)) if seconds == int(seconds) else str(seconds)


def _names_text(names: frozenset[str]) -> str:
    return ",".join(sorted(names))
