"""Turn a demo run's deliveries and executions into the per-job table and the JSON report.

Counts come from two independent sources on purpose: what the Scheduler saw
(deliveries and answers) and what the work did (the execution log, via the
invariant's verdicts). The table puts them side by side so a reader can see
that many deliveries became one execution.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from scheduler_dedup.localrun.demo_invariant import FATE_RAN_ONCE, Invariant
from scheduler_dedup.localrun.demo_plan import WARMUP_JOB, DemoRetryableError, run_label
from scheduler_dedup.localrun.simulator import Fault, RunResult, Seen


def percentile(values: Sequence[float], share: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


# A duplicate that met a live lease waits for that attempt's outcome and answers with it.
WAITED_OUTCOMES = frozenset(
    {"duplicate_waited_completed", "duplicate_waited_failed", "duplicate_waited_released"}
)
_DUPLICATE_200 = frozenset({"duplicate_completed", "duplicate_waited_completed"})
_MET_THE_RUNNING_WORK = WAITED_OUTCOMES | {"duplicate_in_progress"}


@dataclass(frozen=True)
class Misbehaviour:
    """How often each kind of at-least-once delivery actually happened."""

    timeouts: int  # attempts abandoned at the attempt deadline
    retries_while_running: int  # retries after a timeout that found the work still running
    retries_after_error: int  # retries with backoff after a non-2xx answer
    lost_acks: int  # answers dropped after the handler finished
    bursts: int  # first attempts a proxy repeated
    burst_duplicates: int  # the extra copies those bursts sent
    forced_runs: int  # operator-forced runs carrying the next schedule time
    exhausted_runs: int  # runs whose work failed on every attempt until the retries ran out
    dropped_runs: int  # runs the Scheduler never delivered

    def kinds_missing(self) -> list[str]:
        return [name for name, count in asdict(self).items() if count == 0]


@dataclass(frozen=True)
class JobStats:
    job: str
    scheduled_runs: int
    manual_runs: int
    deliveries: int
    duplicates_200: int
    duplicates_409: int
    duplicates_waited: int
    retries: int
    successes_min: int
    successes_max: int
    failed_executions: int
    exhausted: int
    p50_ms: float | None
    p95_ms: float | None


def misbehaviour(results: Sequence[RunResult], invariant: Invariant) -> Misbehaviour:
    deliveries = [d for r in results for d in r.deliveries]
    return Misbehaviour(
        timeouts=sum(d.seen is Seen.TIMEOUT for d in deliveries),
        retries_while_running=sum(
            d.after == Seen.TIMEOUT and d.outcome in _MET_THE_RUNNING_WORK for d in deliveries
        ),
        retries_after_error=sum(bool(d.after and d.after.startswith("status")) for d in deliveries),
        lost_acks=sum(d.seen is Seen.LOST_ACK for d in deliveries),
        bursts=sum(r.plan.burst_size > 1 for r in results),
        burst_duplicates=sum(d.seen is Seen.DUPLICATE for d in deliveries),
        forced_runs=sum(r.plan.fault is Fault.FORCED for r in results),
        exhausted_runs=sum(r.plan.fault is Fault.EXHAUSTED for r in results),
        dropped_runs=sum(r.plan.fault is Fault.DROPPED for r in results),
    )


def job_stats(results: Sequence[RunResult], invariant: Invariant) -> list[JobStats]:
    verdicts = {v.label: v for v in invariant.verdicts}
    stats = []
    for job in dict.fromkeys(r.plan.job for r in results):
        runs = [r for r in results if r.plan.job == job]
        deliveries = [d for r in runs for d in r.deliveries]
        latencies = [d.latency_s * 1000 for d in deliveries if d.status is not None]
        successes = [verdicts[r.plan.label].successes for r in runs]
        p50, p95 = percentile(latencies, 0.50), percentile(latencies, 0.95)
        stats.append(
            JobStats(
                job=job,
                scheduled_runs=sum(not r.plan.manual for r in runs),
                manual_runs=sum(r.plan.manual for r in runs),
                deliveries=len(deliveries),
                duplicates_200=sum(d.outcome in _DUPLICATE_200 for d in deliveries),
                duplicates_409=sum(d.outcome == "duplicate_in_progress" for d in deliveries),
                duplicates_waited=sum(d.outcome in WAITED_OUTCOMES for d in deliveries),
                retries=sum(r.retries for r in runs),
                successes_min=min(successes),
                successes_max=max(successes),
                failed_executions=sum(verdicts[r.plan.label].failures for r in runs),
                exhausted=sum(verdicts[r.plan.label].exhausted for r in runs),
                p50_ms=None if p50 is None else round(p50, 1),
                p95_ms=None if p95 is None else round(p95, 1),
            )
        )
    return stats


_COLUMNS = (
    ("job", "job"),
    ("runs", "scheduled runs"),
    ("manual", "forced runs"),
    ("sent", "deliveries sent"),
    ("dup200", "duplicates answered 200 without work (run done, found at once or waited for)"),
    ("dup409", "duplicates answered 409 without work (run still in progress when the wait ended)"),
    ("waited", "duplicates that waited for the running attempt and answered with its outcome"),
    ("retries", "Scheduler retries"),
    ("ok/run", "successful executions of the work per run (min-max)"),
    ("failed", "executions that failed retryably (each retried)"),
    ("exhaust", "runs whose retries ran out without a success"),
    ("p50 ms", "answer latency, median"),
    ("p95 ms", "answer latency, 95th percentile"),
)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def format_table(stats: Sequence[JobStats]) -> str:
    rows = [[name for name, _ in _COLUMNS]]
    for s in stats:
        per_run = (
            str(s.successes_min)
            if s.successes_min == s.successes_max
            else f"{s.successes_min}-{s.successes_max}"
        )
        rows.append(
            [
                s.job,
                str(s.scheduled_runs),
                str(s.manual_runs),
                str(s.deliveries),
                str(s.duplicates_200),
                str(s.duplicates_409),
                str(s.duplicates_waited),
                str(s.retries),
                per_run,
                str(s.failed_executions),
                str(s.exhausted),
                _ms(s.p50_ms),
                _ms(s.p95_ms),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_legend() -> str:
    return "\n".join(f"  {name:<8} {meaning}" for name, meaning in _COLUMNS[1:])


def _n(count: int, what: str, many: str | None = None) -> str:
    return f"{count} {what}" if count == 1 else f"{count} {many or what + 's'}"


def format_misbehaviour(m: Misbehaviour) -> str:
    return (
        f"misbehaviour: {_n(m.timeouts, 'attempt-deadline timeout')} "
        f"({_n(m.retries_while_running, 'retry', 'retries')} found the work still running), "
        f"{_n(m.retries_after_error, 'retry', 'retries')} with backoff after a non-2xx answer, "
        f"{_n(m.lost_acks, 'lost acknowledgement')}, {_n(m.bursts, 'burst')} "
        f"({_n(m.burst_duplicates, 'concurrent duplicate')}), {_n(m.forced_runs, 'forced run')}, "
        f"{_n(m.exhausted_runs, 'run')} with retries exhausted, "
        f"{_n(m.dropped_runs, 'run')} never delivered"
    )


# A catch-up's exception reaches the run's ledger record, but no request line of the log.
_CAUGHT_UP_ERROR = "in the audit's catch-up (the run's ledger record has it)"


def format_invariant(
    invariant: Invariant, audited: bool = True, errors: Mapping[str, str] | None = None
) -> str:
    """The invariant's verdict and the runs left without a success.

    Those runs count as reported only where an audit ran: without the ledger
    (--without-dedup) nothing reports them. A run the team's job failed is the
    job's failure, shown with the exception the handler logged for it (`errors`,
    from `job_errors`), never a violation.
    """
    runs = len(invariant.verdicts)
    lines = []
    if invariant.holds:
        succeeded = sum(v.successes == 1 for v in invariant.verdicts)
        lines.append(
            f"invariant HOLDS: the work of {succeeded} of {runs} runs succeeded, each exactly "
            "once; none was lost; no two executions of a run overlapped"
        )
    else:
        lines.append(f"invariant VIOLATED in {len(invariant.violations)} case(s):")
        lines.extend(f"  - {violation}" for violation in invariant.violations)
    reported = "reported, not lost" if audited else "no audit without the ledger"
    for label in invariant.exhausted:
        lines.append(
            f"  retries exhausted ({reported}): {label} has no successful execution; "
            "Cloud Scheduler gives up here too, so alert on it"
        )
    for label in invariant.dropped:
        lines.append(
            f"  never delivered ({reported}): {label} has no execution; "
            "only an audit of the ledger notices such a run"
        )
    for label in invariant.skipped:
        lines.append(
            f"  deliberately not run (overlap: skip): {label} was delivered while another run "
            "of its job still worked; recorded skipped, never run, not a finding"
        )
    for verdict in invariant.backfills:
        lines.append(
            f"  backfilled: {verdict.label} was never delivered; the audit's backfill pass ran "
            f"it, work succeeded {verdict.successes}x"
        )
    for verdict in (v for v in invariant.verdicts + invariant.backfills if v.job_failed):
        error = (errors or {}).get(verdict.label, _CAUGHT_UP_ERROR)
        lines.append(
            f"  your job failed on every attempt (a failure of your job, not of exactly-once): "
            f"{verdict.label} raised {error} ({_n(verdict.failures, 'failed execution')})"
        )
    return "\n".join(lines)


# The handler's answers for an execution that raised: its log line carries the exception.
_FAILED_OUTCOMES = frozenset({"failed_retryable", "failed_terminal"})


def job_errors(lines: Iterable[str]) -> dict[str, str]:
    """Each run's last exception of the team's job, `Type: message`, as the handler logged it.

    Read from the `error` field of the handler's one structured line per request
    (`runledger.delivery.log`); the failures the demo injects are not the job's.
    """
    injected = f"{DemoRetryableError.__name__}:"
    errors = {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("outcome") not in _FAILED_OUTCOMES:
            continue
        job, when, error = entry.get("job"), entry.get("schedule_time"), entry.get("error")
        if (
            isinstance(job, str)
            and isinstance(when, str)
            and isinstance(error, str)
            and not error.startswith(injected)
        ):
            manual = entry.get("manual") is True
            errors[run_label(job, datetime.fromisoformat(when), manual)] = error
    return errors


def format_verdict(results: Sequence[RunResult], invariant: Invariant, audited: bool) -> str:
    """The demo's last line: what ran exactly once, what was injected, how each was reported.

    The exit status is named as both commands return it: make turns any failing
    recipe into its own status 2.
    """
    jobs = ", ".join(dict.fromkeys(r.plan.job for r in results))
    m = misbehaviour(results, invariant)
    if not invariant.holds:
        return (
            f"verdict: exactly-once VIOLATED in {len(invariant.violations)} case(s) listed above "
            f"(jobs {jobs}); python -m scheduler_dedup.localrun.demo exits 1, make demo 2"
        )
    failed = invariant.job_failed
    yours = (
        f"; your job failed on every attempt in {_n(len(failed), 'run')} "
        f"({', '.join(dict.fromkeys(label.split('@')[0] for label in failed))}), "
        "shown above with its exception: a failure of your job, not of exactly-once"
        if failed
        else ""
    )
    once = sum(v.successes == 1 for v in invariant.verdicts)
    absorbed = (
        f"{_n(m.timeouts, 'timeout')}, {_n(m.lost_acks, 'lost ack')}, "
        f"{_n(m.bursts, 'burst')}, {_n(m.forced_runs, 'forced run')} answered without a second run"
    )
    if audited:
        missed = f"{_n(len(invariant.dropped), 'dropped run')} reported missed"
        released = f"{_n(len(invariant.exhausted), 'exhausted run')} reported released"
        fates = {v.label: v.fate for v in invariant.verdicts}
        caught = sum(
            fates[r.plan.label] == FATE_RAN_ONCE
            for r in results
            if r.plan.fault in (Fault.DROPPED, Fault.EXHAUSTED)
        )
        left = (
            f"{missed}, {released}" + (f", {caught} caught up" if caught else "") + " by the audit"
        )
        if invariant.skipped:
            left += f"; {_n(len(invariant.skipped), 'overlap skip')} deliberately not run"
        if invariant.backfills:
            left += f"; {_n(len(invariant.backfills), 'backfilled time')} ran once"
    else:
        left = (
            f"{_n(m.dropped_runs, 'dropped run')} and {_n(m.exhausted_runs, 'exhausted run')} "
            "not reported (no audit without the ledger)"
        )
    return (
        f"verdict: exactly once HOLDS: {once} of {len(invariant.verdicts)} runs of {jobs} "
        f"ran once each; injected {absorbed}; {left}{yours}; exit status 0"
    )


# Loggers of the machinery around the jobs: the handler, its libraries, the web server.
_MACHINERY_LOGGERS = ("runledger", "scheduler_dedup", "google", "werkzeug", "functions_framework")


def format_job_logs(lines: Iterable[str], limit: int = 8) -> str | None:
    """The jobs' own log lines among the handler's output, each with the run it belongs to.

    The handler writes Cloud Logging's structured entries (runledger.sdk.joblog);
    a job's entry carries the run's fields and its logger's name as a label. The
    handler's own line per request has no logger label and is not the job's; the
    demo's warm-up delivery is no job of the stack.
    """
    found = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        fields = ("message", "run_key", "job", "schedule_time", "attempt_id")
        if not isinstance(entry, dict) or not all(isinstance(entry.get(f), str) for f in fields):
            continue
        logger = entry.get("logging.googleapis.com/labels", {}).get("python_logger", "")
        if not logger or logger.split(".")[0] in _MACHINERY_LOGGERS or entry["job"] == WARMUP_JOB:
            continue
        found.append(
            f"  {entry['job']} {entry['schedule_time']} run {entry['run_key'][:12]} "
            f"attempt {entry['attempt_id'][:8]} {entry.get('severity', '')}: {entry['message']}"
        )
    if not found:
        return None
    shown = found[:limit]
    more = f" (first {limit} of {len(found)})" if len(found) > limit else ""
    return "\n".join(["your jobs' log lines, each with its run" + more + ":", *shown])


def json_report(
    settings: dict[str, Any],
    results: Sequence[RunResult],
    invariant: Invariant,
    errors: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Every run with its fate and the last exception the handler logged for it (or null)."""
    errors = errors or {}
    verdicts = {v.label: v for v in invariant.verdicts}
    return {
        "settings": settings,
        "jobs": [asdict(s) for s in job_stats(results, invariant)],
        "misbehaviour": asdict(misbehaviour(results, invariant)),
        "invariant": {
            "holds": invariant.holds,
            "violations": invariant.violations,
            "exhausted": invariant.exhausted,
            "dropped": invariant.dropped,
            "skipped": invariant.skipped,
            "job_failed": {label: errors.get(label) for label in invariant.job_failed},
            "backfilled": {v.label: v.successes for v in invariant.backfills},
        },
        "runs": [
            {
                "run": r.plan.label,
                "job": r.plan.job,
                "schedule_time": r.plan.schedule_time.isoformat(),
                "manual": r.plan.manual,
                "fault": None if r.plan.fault is None else str(r.plan.fault),
                "acknowledged": r.acknowledged,
                "exhausted": r.exhausted,
                "fate": verdicts[r.plan.label].fate,
                "successful_executions": verdicts[r.plan.label].successes,
                "failed_executions": verdicts[r.plan.label].failures,
                "error": errors.get(r.plan.label),
                "deliveries": [
                    {
                        "attempt": d.attempt,
                        "seen": str(d.seen),
                        "status": d.status,
                        "outcome": d.outcome,
                        "latency_ms": round(d.latency_s * 1000, 1),
                        "after": d.after,
                    }
                    for d in r.deliveries
                ],
            }
            for r in results
        ],
    }
