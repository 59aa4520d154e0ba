"""The demo's audit: the handler's reserved audit job, and what it found against what happened.

The demo replays fire times of the past hours, as if the stack had been running
then. A deployed stack's first audit records each job's epoch, and nothing
before it is judged (`runledger.ledger.epochs`); so before the replay the demo records
the epochs a stack deployed before those runs would have, through the
handler's own code, in the handler's project and database.

After the Scheduler is done, the demo delivers the audit job (DEDUP_AUDIT_JOB) to the handler
as the stack's audit Scheduler job would. The handler claims that run in the
ledger, audits every job's schedule times and logs one structured line per
finding and a summary line, the lines Cloud Logging would receive. The demo
reads those lines from the handler's output and holds them against what the
simulator did: every run the Scheduler never delivered must be reported
`missed`, every run whose retries ran out without a success `released`, and
nothing else. With catch-up on, each of them must also have been run by the
audit, which the execution log then shows as exactly one success.
"""

from __future__ import annotations

import json
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runledger.audit.expected import ExpectedRun, schedule_times
from runledger.audit.findings import Finding
from runledger.config import Settings
from runledger.ledger.epochs import record_epochs
from runledger.schedules import LOOKBACK_VARIABLE, JobSchedule, audit_job_id, audit_settings
from scheduler_dedup.localrun.demo_invariant import Invariant
from scheduler_dedup.localrun.demo_plan import run_label
from scheduler_dedup.localrun.simulator import (
    RunPlan,
    SimJob,
    Transport,
    build_request,
    next_fire_time,
)

if TYPE_CHECKING:
    from scheduler_dedup.localrun.emulator import FirestoreEmulator

# The audit and its catch-ups run inside one request; a few dozen runs take seconds.
AUDIT_TIMEOUT_S = 60.0
_FINDINGS = {finding.outcome: finding for finding in Finding}


@dataclass(frozen=True)
class LoggedFinding:
    """One finding line of the handler's log."""

    job: str
    schedule_time: datetime
    finding: Finding
    catch_up: str | None

    @property
    def label(self) -> str:
        return run_label(self.job, self.schedule_time, manual=False)


@dataclass(frozen=True)
class AuditOutcome:
    status: int | None  # the handler's answer to the audit delivery
    outcome: str | None
    findings: tuple[LoggedFinding, ...]
    summary: Mapping[str, Any] | None  # the `audit_summary` line
    problems: tuple[str, ...]  # where the findings disagree with what the simulator did

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "outcome": self.outcome,
            "summary": None if self.summary is None else dict(self.summary),
            "findings": [
                {
                    "run": item.label,
                    "finding": item.finding.value,
                    "catch_up": item.catch_up,
                }
                for item in self.findings
            ],
            "accounts_for_every_run": not self.problems,
            "problems": list(self.problems),
        }


def record_deploy_epochs(
    emulator: FirestoreEmulator, env: Mapping[str, str], deployed: datetime
) -> None:
    """Each job's audit epoch at `deployed`, where the handler configured by `env` reads it."""
    from google.cloud import firestore

    from runledger.ledger.firestore_store import FirestoreRunStore

    settings = Settings.from_env(env)
    config = audit_settings(env, settings)
    with emulator.as_process_env():  # the client takes the emulator's host when it is made
        client = firestore.Client(project=env["GOOGLE_CLOUD_PROJECT"], database=settings.database)
    store = FirestoreRunStore(client, settings.collection)
    record_epochs(store, config.project, config.region, config.schedules, deployed)


def settled_by(plans: Sequence[RunPlan], env: Mapping[str, str]) -> datetime:
    """When the audit, by its own rule, judges the last of the planned scheduled runs.

    `ExpectedRun.settles_at` is the handler's rule: the run's last instant + the
    job's retry window + the lease + clock skew, on the handler's clock. A wall
    time the clocks repeat (a fall-back night) is one run with two instants, so it
    settles from the later one, whichever instant the Scheduler stamped.
    """
    settings = Settings.from_env(env)  # read as the handler reads its environment
    schedules = {job.id: job for job in audit_settings(env, settings).schedules}
    lease = settings.lease
    return max(
        (
            _expected(schedules[plan.job], plan.schedule_time).settles_at(lease)
            for plan in plans
            if not plan.manual
        ),
        default=datetime.min.replace(tzinfo=UTC),
    )


def _expected(job: JobSchedule, when: datetime) -> ExpectedRun:
    """The audit's scheduled run that `when` is an instant of."""
    around = schedule_times(job, when - timedelta(microseconds=1), when)
    return next((run for run in around if when in run.instants), ExpectedRun(job, (when,)))


def late_runs(jobs: Sequence[SimJob], since: datetime, until: datetime) -> list[RunPlan]:
    """Fire times in (since, until], that came due while the demo ran: Scheduler delivers them too.

    Without them the audit would rightly report such a run missed once its
    (compressed) retry window had passed.
    """
    plans = []
    for job in jobs:
        when = next_fire_time(job.schedule, job.time_zone, since)
        while when <= until:
            plans.append(RunPlan(job.id, when, False, None, ()))
            when = next_fire_time(job.schedule, job.time_zone, when)
    return sorted(plans, key=lambda plan: (plan.schedule_time, plan.job))


Answer = tuple[int | None, str | None]  # status (None: no answer) and outcome


def deliver_audit(
    transport: Transport, template: SimJob, now: datetime, env: Mapping[str, str]
) -> Answer:
    """One delivery of the reserved audit job (DEDUP_AUDIT_JOB in the handler's `env`), with
    the headers the stack's audit job sends."""
    audit_job = audit_job_id(env)
    job = replace(template, id=audit_job, body=b"")
    stamp = now.replace(microsecond=0)
    plan = RunPlan(audit_job, stamp, False, None, ())
    answer = transport.send_all([build_request(job, plan, random.Random(0))], AUDIT_TIMEOUT_S)[0]
    return answer.status, answer.outcome


def read_log(lines: Iterable[str]) -> tuple[list[LoggedFinding], dict[str, Any] | None]:
    """The audit's finding lines and its summary line among the handler's output."""
    findings: list[LoggedFinding] = []
    summary = None
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # the server's own lines are not JSON
        if not isinstance(entry, dict):
            continue
        outcome = entry.get("outcome")
        if outcome == "audit_summary":
            summary = entry
        elif outcome in _FINDINGS:
            findings.append(
                LoggedFinding(
                    entry["job"],
                    datetime.fromisoformat(entry["schedule_time"]),
                    _FINDINGS[outcome],
                    entry.get("catch_up"),
                )
            )
    return findings, summary


def expected_findings(before: Invariant) -> dict[str, Finding]:
    """What the audit must report, from the execution log before it ran."""
    expected = {label: Finding.MISSED for label in before.dropped}
    expected.update({label: Finding.RELEASED for label in before.exhausted})
    return expected


# How the audit may report a run the team's own job failed: released (it raised), or
# failed (TerminalJobError), once; or not at all when the run is no scheduled time in its look-back.
_JOB_FAILED_FINDINGS = frozenset({Finding.RELEASED, Finding.FAILED})


def check_findings(
    expected: Mapping[str, Finding],
    findings: Sequence[LoggedFinding],
    catch_up: bool,
    job_failed: Collection[str] = (),
) -> list[str]:
    """Every run without a success reported once, as the right kind; with catch-up, run.

    `job_failed`: the runs the team's job failed (`Invariant.job_failed`), whose
    report the audit's look-back decides; reported, they must be released or failed,
    and a catch-up that ran the job again may have failed too.
    """
    problems = []
    reported = {item.label: item for item in findings}
    for label, kind in expected.items():
        item = reported.get(label)
        if item is None:
            problems.append(f"{label}: {kind.value} but the audit did not report it")
        elif item.finding is not kind:
            problems.append(f"{label}: reported {item.finding.value}, expected {kind.value}")
        elif catch_up and item.catch_up != "completed" and label not in job_failed:
            problems.append(f"{label}: catch-up answered {item.catch_up or 'nothing'}")
    for item in findings:
        if item.label in job_failed and item.finding not in _JOB_FAILED_FINDINGS:
            problems.append(f"{item.label}: reported {item.finding.value}, but your job failed it")
        elif item.label not in expected and item.label not in job_failed:
            problems.append(f"{item.label}: reported {item.finding.value}, but it succeeded")
    if len(reported) != len(findings):
        problems.append("the audit reported a run twice")
    return problems


def audit_outcome(
    answer: Answer,
    log_path: Path,
    expected: Mapping[str, Finding],
    catch_up: bool,
    job_failed: Collection[str] = (),
) -> AuditOutcome:
    status, outcome = answer
    findings, summary = read_log(log_path.read_text(errors="replace").splitlines())
    problems = check_findings(expected, findings, catch_up, job_failed)
    if status != 200 or summary is None:
        problems.insert(0, f"the audit delivery got {status or 'no answer'} ({outcome})")
    return AuditOutcome(status, outcome, tuple(findings), summary, tuple(problems))


_WHY = {Finding.MISSED: "never delivered", Finding.RELEASED: "retries exhausted"}
_WHY_JOB_FAILED = "your job failed on every attempt"


def format_audit(
    audit: AuditOutcome, env: Mapping[str, str], job_failed: Collection[str] = ()
) -> str:
    lookback_h = int(env[LOOKBACK_VARIABLE]) / 3600
    lines = [
        f"audit: {audit_job_id(env)} delivered as the stack's audit job would -> "
        f"{audit.status or 'no answer'} {audit.outcome or ''}".rstrip()
    ]
    if audit.summary is not None:
        s = audit.summary
        lines.append(
            f"  look-back {lookback_h:.1f} h, {s['jobs']} jobs: {s['checked']} scheduled times "
            f"in it checked against the ledger, {s['pending']} still inside their retry window, "
            f"{s['reads']} document reads, {s['findings']} finding(s), "
            f"{s['caught_up']} caught up"
        )
        lines.append(
            "  (the other runs are older than the look-back or forced runs, which have no "
            "scheduled time; retries and duplicates are more deliveries of the same runs)"
        )
        for paused in s.get("paused_jobs", []):
            lines.append(f"  paused    {paused['job']:<36} not run, not a finding (no page)")
        if s.get("skipped"):
            lines.append(
                f"  skipped   {s['skipped']} run(s) by their overlap policy: deliberately not run, "
                "not a finding (no page)"
            )
        backfill = s.get("backfill") or {}
        if backfill.get("runs"):
            outcomes = ", ".join(f"{n} {name}" for name, n in sorted(backfill["outcomes"].items()))
            lines.append(
                f"  backfill  {backfill['requests_done']} request(s) done, {backfill['ran']} "
                f"time(s) run once through the claim ({outcomes})"
            )
    for item in audit.findings:
        why = _WHY_JOB_FAILED if item.label in job_failed else _WHY.get(item.finding, "")
        caught = f"  catch-up: {item.catch_up}" if item.catch_up else ""
        lines.append(f"  {item.finding.value:<9} {item.label:<36} {why}{caught}")
    if audit.problems:
        lines.append(
            f"audit DISAGREES with the simulator in {len(audit.problems)} case(s), "
            "listed under the invariant"
        )
    else:
        lines.append(
            "audit ACCOUNTS for every run: each run without a success was reported, "
            + ("those your job failed as far as its look-back reaches, " if job_failed else "")
            + "and nothing else"
        )
    return "\n".join(lines)
