"""The audit as a job the handler serves: claimed and deduplicated like any run.

The stack's audit Scheduler job delivers under the audit's own job id
(DEDUP_AUDIT_JOB); the audit then runs as that run's job, so two deliveries of
one audit time audit once. It audits from the watermarks
(`runledger.ledger.watermarks`): each settled run read once, each finding's
line logged before the watermark write that moves past it, so an audit that
dies after that write has lost no finding (the next audit judges again what
one that dies before it had logged). Each catch-up goes
through the handler's own claim (`catch_up`), as a delivery does, so a late
Scheduler retry of that run and the audit cannot both run it. After judging,
it runs the pending backfill requests (`runledger.backfill.runs`) through
the same claim.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from runledger.delivery.dead_letter import KIND_FAILED, KIND_RETRIES_EXHAUSTED
from runledger.facts import TRIGGER_CATCH_UP
from runledger.ledger.machine import Ledger
from runledger.ledger.run import RunIdentity
from runledger.ledger.suspension import Suspension, reported
from runledger.schedules import AuditSettings, JobSchedule
from runledger.sdk.context import RunContext
from runledger.sdk.registry import JobFn

if TYPE_CHECKING:
    from runledger.audit.findings import AuditFinding
    from runledger.audit.scheduler_state import Lister
    from runledger.audit.suspensions import SuspensionAccess
    from runledger.backfill.queue import BackfillDocs
    from runledger.delivery.dead_letter import DeadLetters


def audit_job(
    settings: AuditSettings,
    *,
    lease: timedelta,
    ledger: Callable[[], Ledger],
    catch_up: Callable[[RunIdentity, str], str],
    live: Lister | None = None,
    backfills: Callable[[], BackfillDocs] | None = None,
    jobs: Mapping[str, JobFn] | None = None,
    dead_letters: DeadLetters | None = None,
) -> JobFn:
    """The job that audits `settings.schedules` on the ledger `ledger()` returns.

    `ledger` is called on each audit, so the store is connected on the first
    delivery, as for any job; `catch_up` claims and runs one run under the
    trigger it is given and returns its outcome. `live` lists the jobs' live
    state (None: Scheduler is not asked, DEDUP_SCHEDULES says). `backfills`
    gives the pending backfill requests, run after judging (None: no backfill
    pass); `jobs` are the jobs served, so a request for one that is not is
    reported, not run. With `dead_letters`, each `failed` finding whose dead letter
    is not noted on its run, and each `released` one (Scheduler's retries are over)
    whose run no catch-up moved on, is published, after its line and before the
    watermark moves past it. The audit's and the backfill's modules are imported by
    the audit's first run: a handler that serves other deliveries first (every
    cold start does) never loads them for those.
    """

    def run_audit(context: RunContext) -> None:
        from runledger.audit.report import log_findings, log_summary
        from runledger.audit.runner import Audit
        from runledger.backfill.runs import Runner, run_pending

        def caught_up(run: RunIdentity) -> str:
            context.ensure_lease()  # an audit that lost its run stops catching up
            return catch_up(run, TRIGGER_CATCH_UP)

        def emitted(findings: Sequence[AuditFinding]) -> None:
            log_findings(findings)
            assert dead_letters is not None  # emitted is used only with dead letters
            for finding in findings:
                kind = dead_letter_kind(finding)
                if kind is not None and finding.run_key is not None:
                    dead_letters.send(current, finding.run_key, kind)

        current = ledger()
        audit = Audit(
            settings,
            lease=lease,
            read=current.read_many,
            clock=current.now,
            catch_up=caught_up,
            live=live,
            marks=current.audit_marks(settings.project, settings.region),
            emit=log_findings if dead_letters is None else emitted,
            suspensions=ledger_suspensions(current, settings.project, settings.region),
        )
        report = audit.run()
        if backfills is not None:
            runner = Runner(current, jobs or {}, audit.identity, catch_up, context.ensure_lease)
            tally = run_pending(backfills(), runner, settings.project, settings.region)
            report = replace(report, backfill=tally.to_json())
        log_summary(report, job=settings.job)

    return run_audit


def ledger_suspensions(ledger: Ledger, project: str, region: str) -> SuspensionAccess:
    """The handler's audit's access to the jobs' suspensions: read, mark reported, count."""
    from runledger.audit.suspensions import SuspensionAccess

    def read(jobs: Sequence[JobSchedule]) -> dict[str, Suspension]:
        found = {job.id: ledger.job_suspension(project, region, job.id) for job in jobs}
        return {job: state for job, state in found.items() if state is not None}

    def mark(job: str, state: Suspension) -> None:
        if state.since is not None:
            ledger.change_suspension(project, region, job, reported(state.since, ledger.now()))

    def count(run: RunIdentity, threshold: int, error: str | None) -> None:
        ledger.count_outcome(run, True, threshold, error)

    return SuspensionAccess(read, mark, count)


def dead_letter_kind(finding: AuditFinding) -> str | None:
    """The dead letter an audit finding calls for, if any.

    `failed`: the run failed for good, its letter sent at delivery unless the handler
    died first (the note on the run tells). `released`: Scheduler's retries are over.
    A catch-up that completed the run, or failed it for good (published then, by the
    pipeline), moved its record on, and `DeadLetters.send` sends nothing for it.
    """
    from runledger.audit.findings import Finding

    return {Finding.FAILED: KIND_FAILED, Finding.RELEASED: KIND_RETRIES_EXHAUSTED}.get(
        finding.finding
    )
