"""The facts every part of the bundle must agree on, in one Pulumi-free module.

The handler, the Pulumi program, the local demo and the policy pack each need the
same Cloud Scheduler limits, retry arithmetic, unix-cron rules, Firestore id rules
and the handler's own defaults. They import them from here. The policy pack must
install on its own (it ships with only the Pulumi SDKs), so it carries a
byte-identical copy at `policies/dedup_policies/facts.py`; `tests/test_shared_facts.py`
fails when the two differ. Standard library only, no imports from the rest of the
bundle.

Sources: Cloud Scheduler REST reference (`Job.attemptDeadline`, `RetryConfig`),
"Deduplicate job requests" (headers, unix-cron), Firestore `CreateDatabaseRequest`
(database ids) and "Manage data retention with TTL policies" (the TTL field).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

# --- Cloud Scheduler ------------------------------------------------------------------------

# Headers Cloud Scheduler adds to every HTTP-target delivery; the run key is built from them.
JOB_HEADER = "X-CloudScheduler-JobName"
SCHEDULE_HEADER = "X-CloudScheduler-ScheduleTime"

# attemptDeadline for HTTP targets: default 3 minutes, allowed 15 seconds to 30 minutes.
DEFAULT_ATTEMPT_DEADLINE_S = 180
MIN_ATTEMPT_DEADLINE_S = 15
MAX_ATTEMPT_DEADLINE_S = 30 * 60
# RetryConfig.retryCount: 0 to 5; larger or negative values are rejected.
MAX_RETRY_COUNT = 5
# RetryConfig.maxDoublings has no documented upper bound; past 16 doublings of the
# 5 s default, the interval is beyond maxBackoffDuration's useful range anyway.
MAX_DOUBLINGS = 16
# The provider sends a RetryConfig field only when it is not its type's zero value
# (terraform-provider-google google/services/cloudscheduler/resource_cloud_scheduler_job.go,
# expandCloudSchedulerJobRetryConfig: `!tpgresource.IsEmptyValue(val)`, and IsEmptyValue is
# true for integer 0 and for ""). So `maxDoublings: 0` never reaches Cloud Scheduler, which
# applies its default of 5 doublings: it is refused, and read as 5 where it shows up.
# retryCount 0 is dropped too, but 0 is Scheduler's default, so it holds; the durations
# are strings ("0s" is not empty), so they are sent as given.
DROPPED_MAX_DOUBLINGS = 0

# Header names HttpTarget.headers may not use: target.proto reserves names beginning
# "X-Google-" and "X-AppEngine-" for Google. The provider checks them case-sensitively
# while header names are case-insensitive, so a lower-case `x-google-project` passes it
# and every delivery then arrives without that header. Compared lower-cased here.
RESERVED_HEADER_PREFIXES = ("x-google-", "x-appengine-")


def reserved_header_prefix(name: str) -> str | None:
    """The reserved prefix `name` begins with, in any case, or None."""
    lowered = name.lower()
    return next((p for p in RESERVED_HEADER_PREFIXES if lowered.startswith(p)), None)


# Headers every Scheduler job of the stack carries for itself: `Content-Type`, which the
# program sets (or leaves to Scheduler's default, application/octet-stream). A project or
# region header of the same name would be replaced by it, and every delivery refused.
# Header names compare case-insensitively; lower-cased here.
JOB_SET_HEADERS = ("content-type",)

# The Cloud Run functions runtime ids the handler can run on: the machinery needs
# Python 3.11 or newer (`datetime.UTC`, `enum.StrEnum`; pyproject.toml's
# requires-python), and the Python runtime ids are "python3" and the minor version.
MIN_PYTHON_MINOR = 11
PYTHON_RUNTIMES = ("python311", "python312", "python313")
_PYTHON_RUNTIME = re.compile(r"python3(\d{1,2})")


def python_runtime_problem(runtime: str) -> str:
    """Why the handler cannot run on `runtime`; "" if it can."""
    found = _PYTHON_RUNTIME.fullmatch(runtime)
    if found and int(found.group(1)) >= MIN_PYTHON_MINOR:
        return ""
    supported = ", ".join(PYTHON_RUNTIMES)
    if found:
        return (
            f"{runtime!r} is Python 3.{found.group(1)}, older than the 3.{MIN_PYTHON_MINOR} the "
            f"handler needs (it would build, then fail at import); use one of {supported}"
        )
    return f"{runtime!r} is not a Cloud Run functions Python runtime id; use one of {supported}"


# A Cloud Scheduler JOB_ID: letters, digits, hyphens and underscores, at most 500.
JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,500}")


@dataclass(frozen=True)
class RetryPolicy:
    """A job's RetryConfig, durations in seconds, Cloud Scheduler's defaults filled in."""

    retry_count: int = 0
    max_retry_duration_s: float = 0  # 0: no time limit
    min_backoff_s: float = 5
    max_backoff_s: float = 3600
    max_doublings: int = 5

    def backoff_s(self, retry_index: int) -> float:
        """Wait before retry number `retry_index` (0-based), as Cloud Scheduler spaces them.

        The interval doubles `max_doublings` times, then grows linearly by the last
        doubled interval, and never exceeds `max_backoff_s` (RetryConfig.maxDoublings).
        """
        doublings = max(0, self.max_doublings)
        if retry_index <= doublings:
            wait = self.min_backoff_s * 2**retry_index
        else:
            wait = self.min_backoff_s * 2**doublings * (retry_index - doublings + 1)
        return min(wait, self.max_backoff_s)

    def retry_window_s(self, attempt_deadline_s: float) -> float:
        """Longest time from a run's first attempt until its last attempt can end.

        With both `retry_count` and `max_retry_duration` set, Cloud Scheduler retries
        until both limits are reached, so the longer of the two bounds the window; a
        retry that starts just before `max_retry_duration` may run a full deadline.
        """
        retries = max(0, self.retry_count)
        window = attempt_deadline_s * (retries + 1) + sum(self.backoff_s(i) for i in range(retries))
        if self.max_retry_duration_s > 0:
            window = max(window, self.max_retry_duration_s + attempt_deadline_s)
        return window


# --- unix-cron ------------------------------------------------------------------------------

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_CRON_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    # name, lowest, highest, names usable instead of numbers (from `lowest` on)
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
# Quartz-only day forms: last day (L, 5L, L-3), nearest weekday (15W, LW).
_QUARTZ = re.compile(r"\d*L(-\d+)?|\d+W|LW")
_GROC_START = re.compile(
    r"(every|\d+(st|nd|rd|th)|first|second|third|fourth|last|[a-z]+day)\b", re.IGNORECASE
)


def _cron_value(token: str, low: int, names: tuple[str, ...]) -> int | None:
    if token.isascii() and token.isdigit():
        return int(token)
    if token.upper() in names:
        return names.index(token.upper()) + low
    return None


def _cron_field_problem(text: str, field: str, low: int, high: int, names: tuple[str, ...]) -> str:
    for part in text.split(","):
        if "?" in part or "#" in part or _QUARTZ.fullmatch(part.upper()):
            return f"{field} field {text!r} uses Quartz syntax, not unix-cron"
        base, slash, step = part.partition("/")
        if slash and not (step.isascii() and step.isdigit() and int(step) > 0):
            return f"{field} field {text!r}: step {step!r} is not a positive number"
        if base == "*":
            continue
        bounds = base.split("-")
        if len(bounds) > 2:
            return f"{field} field {text!r} is not unix-cron"
        values = [_cron_value(token, low, names) for token in bounds]
        if None in values:
            return f"{field} field {text!r}: {base!r} is not a number or name"
        if any(not low <= value <= high for value in values):  # type: ignore[operator]
            return f"{field} field {text!r} is outside {low}-{high}"
        if len(values) == 2 and values[0] > values[1]:  # type: ignore[operator]
            return f"{field} field {text!r}: range {base!r} runs backwards"
    return ""


def unix_cron_problem(schedule: str) -> str:
    """Why `schedule` is not a 5-field unix-cron expression; "" when it is one.

    Cloud Scheduler also accepts the English groc format ("every 5 minutes"), but only
    unix-cron schedules are guaranteed to carry X-CloudScheduler-ScheduleTime, which
    the run key is built from ("Deduplicate job requests").
    """
    stripped = schedule.strip()
    if _GROC_START.match(stripped):
        return (
            f"{schedule!r} is groc syntax; Cloud Scheduler only guarantees the "
            f"{SCHEDULE_HEADER} header the deduplication relies on for unix-cron, "
            "so write it as 5 fields, e.g. '*/5 * * * *' for every 5 minutes"
        )
    if stripped.startswith("@"):
        return f"{schedule!r}: cron macros are not supported; use 5 fields"
    fields = schedule.split()
    if len(fields) != len(_CRON_FIELDS):
        return (
            f"{schedule!r} has {len(fields)} fields; unix-cron needs 5: "
            "minute hour day-of-month month day-of-week"
        )
    for text, (field, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        problem = _cron_field_problem(text, field, low, high, names)
        if problem:
            return problem
    return ""


# Days each month can have (February in a leap year, which every 5-year span holds).
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _cron_values(text: str, low: int, high: int, names: tuple[str, ...]) -> set[int]:
    """The values a field that `unix_cron_problem` accepted matches."""
    values: set[int] = set()
    for part in text.split(","):
        base, _, step = part.partition("/")
        if base == "*":
            first, last = low, high
        else:
            bounds = [_cron_value(token, low, names) for token in base.split("-")]
            first = bounds[0] or 0
            # `a-b` ends at b; a lone `a/n` steps from a to the field's end (Vixie cron)
            last = bounds[1] if len(bounds) == 2 else (high if step else first)
            last = last or 0
        values.update(range(first, last + 1, int(step) if step else 1))
    return values


def cron_matches(schedule: str, wall: datetime) -> bool:
    """Whether a schedule that `schedule_problem` accepted fires at wall-clock minute `wall`.

    The two day fields fire on either when both are restricted, else on the
    restricted one ("Cron job format and time zone"); 0 and 7 are Sunday.
    """
    minute, hour, days, months, weekdays = schedule.split()
    fields = _CRON_FIELDS
    if wall.minute not in _cron_values(minute, *fields[0][1:]):
        return False
    if wall.hour not in _cron_values(hour, *fields[1][1:]):
        return False
    if wall.month not in _cron_values(months, *fields[3][1:]):
        return False
    on_day = wall.day in _cron_values(days, *fields[2][1:])
    on_weekday = wall.isoweekday() % 7 in {v % 7 for v in _cron_values(weekdays, *fields[4][1:])}
    if days != "*" and weekdays != "*":
        return on_day or on_weekday
    return on_day and on_weekday


def cron_meaning_problem(schedule: str) -> str:
    """Why a valid unix-cron `schedule` cannot be audited as written; "" when it can.

    Two day fields (day of month, day of week) fire on either when both are
    restricted and on the restricted one when the other is `*` (Cloud Scheduler,
    "Cron job format and time zone"). That page does not say whether a step over
    `*` (`*/2`) counts as unrestricted: Vixie cron treats it so (it then needs both
    fields to match), croniter, which the audit lists schedule times with, does
    not (either field). Such a schedule is refused rather than audited by a rule
    Scheduler may not follow. A schedule no date can ever match (`0 9 31 6 *`,
    June 31st) is refused too: it would never run, and the audit cannot list it.
    """
    fields = schedule.split()
    days, weekdays = fields[2], fields[4]
    for text, other, name, written in (
        (days, weekdays, "day-of-month", "1-31"),
        (weekdays, days, "day-of-week", "0-6"),
    ):
        if text.startswith("*") and text != "*" and other != "*":
            return (
                f"{schedule!r} is ambiguous: {name} {text!r} is a step over '*' while the "
                f"other day field {other!r} is restricted, and cron implementations disagree "
                "whether such a schedule fires on days matching both fields or either "
                "(Cloud Scheduler's cron reference does not say). To fire on days matching "
                f"either, write the step as a range ({written + text[1:]!r}); to fire only on "
                "days matching both, schedule on one field and let the job skip the other days"
            )
    if days == "*" or weekdays != "*":
        return ""  # every month has a day 1..28, and every week each weekday
    day_values = _cron_values(days, *_CRON_FIELDS[2][1:])
    months = _cron_values(fields[3], *_CRON_FIELDS[3][1:])
    if any(day <= _MONTH_DAYS[month - 1] for month in months for day in day_values):
        return ""
    return (
        f"{schedule!r} can never fire: no month it names has a day of the month it names "
        "(no date in any 5-year span matches), so Cloud Scheduler would never run it"
    )


def schedule_problem(schedule: str) -> str:
    """Why `schedule` cannot be a deduplicated, audited job's schedule; "" when it can."""
    return unix_cron_problem(schedule) or cron_meaning_problem(schedule)


# --- Firestore ------------------------------------------------------------------------------

# A database id is "(default)" or 4-63 of a-z, 0-9 and '-', starting with a letter and
# ending with a letter or digit, and not UUID-like (CreateDatabaseRequest.database_id).
DEFAULT_DATABASE = "(default)"
_DATABASE_ID = re.compile(r"[a-z][a-z0-9-]{2,61}[a-z0-9]")
_UUID_LIKE = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")
DATABASE_ID_RULE = "'(default)' or 4-63 of a-z, 0-9, '-', starting with a letter"


def is_database_id(value: str) -> bool:
    """True for exactly the database ids Firestore accepts."""
    if value == DEFAULT_DATABASE:
        return True
    return bool(_DATABASE_ID.fullmatch(value)) and not _UUID_LIKE.fullmatch(value)


# Collection ids the bundle accepts: a safe subset of what Firestore allows.
COLLECTION_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")
# The Timestamp field each ledger document expires at; a TTL policy is set on it.
TTL_FIELD = "expire_at"
# The subcollection of each run document holding its checkpoints and outputs.
WORK_COLLECTION = "runledger_work"
# Exactly the Firestore permissions the handler uses: get (read a run or its work
# items), create (claim with exists=false, once-only checkpoints and outputs) and
# update (update_time-guarded renewal, completion and release). It never deletes,
# lists, queries or opens a transaction.
LEDGER_PERMISSIONS = (
    "datastore.entities.create",
    "datastore.entities.get",
    "datastore.entities.update",
)
# Exactly what the audit calls on Cloud Scheduler: one `projects.locations.jobs.list`
# listing of the stack's location (`runledger.audit.scheduler_state`), which needs
# cloudscheduler.jobs.list ("Cloud Scheduler roles and permissions", "Access control
# with IAM"). The predefined roles/cloudscheduler.viewer also holds
# cloudscheduler.jobs.get and cloudscheduler.jobs.fullView (every job's target headers
# and body), so the stack grants a custom role with these permissions instead. A later
# read the audit makes adds its permission here: the program's role and the pack's
# rule both take the list from this one place.
SCHEDULER_READ_PERMISSIONS = ("cloudscheduler.jobs.list",)
# What the audit's read of Cloud Scheduler's Admin Activity audit log (PauseJob and
# ResumeJob entries, `runledger.audit.pause_log`) needs: entries.list on the project.
PAUSE_LOG_PERMISSIONS = ("logging.logEntries.list",)

# --- the handler's settings -----------------------------------------------------------------

# The contract between the Pulumi program and the handler it deploys: the DEDUP_* variables,
# DEDUP_SCHEDULES and what the handler makes of them. The program sets it on the function
# (DEDUP_CONTRACT_VERSION) and a handler of another contract refuses to start; raise it with
# any change one side reads differently from the other (CHANGELOG.md says when it moved).
CONTRACT_VERSION = 2

DEFAULT_COLLECTION = "scheduler_runs"
DEFAULT_LEASE_S = 360
# DEDUP_HEARTBEAT_SECONDS: the lease a claim takes and each renewal grants, renewed every
# third of it while the job runs (unset: DEDUP_LEASE_SECONDS). The Pulumi program deploys
# HEARTBEAT_S, so a holder that dies blocks its run for about a minute, not a whole request
# timeout. The floor lets one renewal fail outright (a store call gives up after 8 s, a
# renewal after a lost answer makes two) and the next still land: 2/3 x 48 + 2 x 8 = 48.
HEARTBEAT_S = 60
MIN_HEARTBEAT_S = 48
DEFAULT_RETENTION_S = 7 * 24 * 3600
DEFAULT_PROJECT_HEADER = "X-Dedup-Project"
DEFAULT_REGION_HEADER = "X-Dedup-Region"
DEFAULT_JOBS_MODULE = "jobs"
# DEDUP_MANUAL_RUNS: "separate" runs a forced run under its own key, "reject" refuses it.
MANUAL_RUN_MODES = ("separate", "reject")
# `trigger` of a run record and of every log line of a run: what started that attempt.
# A record written before the field existed reads as TRIGGER_SCHEDULED.
TRIGGER_SCHEDULED = "scheduled"  # a Cloud Scheduler delivery at its schedule time
TRIGGER_MANUAL = "manual"  # a forced run (DEDUP_MANUAL_RUNS)
TRIGGER_CATCH_UP = "catch_up"  # the audit's catch-up of a missed or released run
TRIGGER_BACKFILL = "backfill"  # a backfill request (`python -m runledger.ops backfill`)
TRIGGERS = (TRIGGER_SCHEDULED, TRIGGER_MANUAL, TRIGGER_CATCH_UP, TRIGGER_BACKFILL)
# The runs the audit starts itself: one that meets a running holder waits (nothing written)
# for a later audit, never `skipped` (docs/audit.md, "Overlap").
AUDIT_TRIGGERS = (TRIGGER_CATCH_UP, TRIGGER_BACKFILL)
HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,100}")

# --- the handler's log lines ----------------------------------------------------------------

# `outcome` values of the handler's structured log lines (one per request from
# runledger.service.app, one per audit finding and one summary from
# runledger.audit.report) that the stack's log-based metrics and alerts count and
# the policy pack looks for in alerting.
# tests/infra/test_infra_audit.py checks each against the line the handler writes.
OUTCOME_FAILED_TERMINAL = "failed_terminal"  # the job raised TerminalJobError
# The ledger could not be read or written: not reachable, permission not (yet) there,
# or a database that can never hold it.
LEDGER_UNAVAILABLE_OUTCOMES = ("store_unavailable", "store_permission_denied", "store_unusable")
OUTCOME_RUN_MISSED = "run_missed"
OUTCOME_RUN_STALE = "run_stale"
OUTCOME_RUN_FAILED = "run_failed"
OUTCOME_RUN_RELEASED = "run_released"
OUTCOME_AUDIT_SUMMARY = "audit_summary"
# The field of a delivery's log line giving how many seconds its run went on past its
# job's attempt deadline (only on such a line): the dashboard counts these.
OUTLIVED_DEADLINE_FIELD = "outlived_attempt_deadline_s"
# The field of a delivery's log line answered as the duplicate of a run another region's
# delivery claimed first (its value: that region), in a stack of several regions.
CROSS_REGION_FIELD = "cross_region_duplicate"
# A run that failed for good: at delivery, or found by the audit.
FAILED_RUN_OUTCOMES = (OUTCOME_FAILED_TERMINAL, OUTCOME_RUN_FAILED)
# A scheduled run that never finished: none started, its lease ran out, or Scheduler's
# retries ended on a retryable failure.
MISSED_RUN_OUTCOMES = (OUTCOME_RUN_MISSED, OUTCOME_RUN_STALE, OUTCOME_RUN_RELEASED)
# A job the audit could not judge run by run: its live schedule or time zone in Cloud
# Scheduler is not the deployed one (or the job is gone), or its times cannot be listed;
# or one whose pause log disagrees with its live state (a pause or resume the log does
# not show: its times' state is unknown).
OUTCOME_JOB_DRIFTED = "job_drifted"
OUTCOME_JOB_UNAUDITABLE = "job_unauditable"
OUTCOME_JOB_PAUSE_LOG_DISAGREES = "job_pause_log_disagrees"
# Times of a job that left the audit's look-back before any audit judged them (an audit
# kept away longer than the look-back allows): one line naming the job and the span.
OUTCOME_JOB_RUNS_UNJUDGED = "job_runs_unjudged"
JOB_FINDING_OUTCOMES = (
    OUTCOME_JOB_DRIFTED,
    OUTCOME_JOB_UNAUDITABLE,
    OUTCOME_JOB_PAUSE_LOG_DISAGREES,
    OUTCOME_JOB_RUNS_UNJUDGED,
)
# A delivery deliberately not run because another run of its job was in progress
# (`overlap: skip`), and one answered retryably to come back after it (`overlap: delay`).
OUTCOME_OVERLAP_SKIPPED = "overlap_skipped"
OUTCOME_OVERLAP_DELAYED = "overlap_delayed"
# A delivery (or a backfill's run) of a run another attempt holds under a live lease.
OUTCOME_DUPLICATE_IN_PROGRESS = "duplicate_in_progress"
# A delivery of a time outside its job's active window (`startAt`/`endAt`): answered 2xx,
# nothing written, never run.
OUTCOME_OUTSIDE_WINDOW = "outside_window"
# A delivery of a suspended job (`suspendAfterFailures`, `ops suspend`): answered 2xx, the
# run recorded `suspended`, never run; and the audit's one finding when a suspension begins.
OUTCOME_SUSPENDED = "suspended"
OUTCOME_JOB_SUSPENDED = "job_suspended"
# The field of a run's final log line giving how long after its schedule time its attempt
# claimed it (seconds): the `<prefix>-start-lag` metric and the start-lag alert read it.
START_LAG_FIELD = "start_lag_s"

# --- the overlap policy ---------------------------------------------------------------------

# A job's `overlap` (stack config jobs[i].overlap, DEDUP_SCHEDULES "overlap"): what a
# delivery does while another run of the same job is in progress. "allow" runs it anyway
# (the default), "skip" records it skipped and never runs it, "delay" answers it
# retryably so Cloud Scheduler's retries bring it back (`runledger.ledger.overlap`).
OVERLAP_ALLOW = "allow"
OVERLAP_SKIP = "skip"
OVERLAP_DELAY = "delay"
OVERLAP_POLICIES = (OVERLAP_ALLOW, OVERLAP_SKIP, OVERLAP_DELAY)
