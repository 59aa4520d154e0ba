"""The audit's backfill pass: each pending request's times run once, through the claim.

The audit job (`runledger.service.audit_job`) takes each pending request in order and
runs its times through the handler's claim with trigger `backfill`: the same
claim as a delivery, so a late Scheduler retry racing it still gives one
execution, and a time completed since the plan is a duplicate, not a second
run. A failed run is released first, fenced by the version read, and only while
its record is still the failed attempt the request saw (`failed_attempts`): a
run the backfill itself reran and that failed again is another attempt, and is
not rerun by a later audit. No clock takes part, so the operator's laptop and
the handler may disagree on the time. After each time the request's
position moves on (fenced), so an audit that stops half-way leaves the rest to
the next one and never repeats a time; at the end the request is marked done
and leaves the queue. A time not run yet (`NOT_YET_OUTCOMES`: the ledger
unreachable, another run of a `skip`/`delay` job in progress, or the time held
under a live lease) keeps the position where it is: the next audit tries that
time again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from runledger import facts
from runledger.audit.findings import rfc3339
from runledger.backfill.plan import (
    ACTION_RERUN_COMPLETED,
    ACTION_RERUN_FAILED,
    MODE_FAILED,
    MODE_MISSING,
)
from runledger.backfill.queue import (
    DONE,
    PENDING,
    BackfillDocs,
    queue_change,
    queue_key,
    without_key,
)
from runledger.delivery.identify import generation_key
from runledger.delivery.log import log_line
from runledger.exceptions import StoreUnavailable, VersionConflict
from runledger.facts import LEDGER_UNAVAILABLE_OUTCOMES, TRIGGER_BACKFILL
from runledger.ledger.machine import Ledger, ReleaseRefused
from runledger.ledger.record import Status
from runledger.ledger.run import RunIdentity

# Outcomes of the handler's claim-and-run in which the job ran (the rest are
# duplicates or store errors).
RAN_OUTCOMES = frozenset(
    {"completed", facts.OUTCOME_FAILED_TERMINAL, "failed_retryable", "lease_lost"}
)
# Outcomes in which the time was not run yet and nothing was recorded for it: the ledger
# could not be reached, another run of its job was in progress (a backfill run of a
# `skip` or `delay` job waits, never `skipped`: the operator asked for it), or the time
# itself is held by an attempt whose lease is live by the handler's clock (the plan, on
# the operator's clock, cannot tell a live lease from one that ran out). The request
# keeps its position, and the next audit tries the time again: by then its holder has
# finished it (a duplicate, done) or its lease has run out (taken over and run).
NOT_YET_OUTCOMES = frozenset(
    {
        *LEDGER_UNAVAILABLE_OUTCOMES,
        facts.OUTCOME_OVERLAP_DELAYED,
        facts.OUTCOME_OVERLAP_SKIPPED,
        facts.OUTCOME_DUPLICATE_IN_PROGRESS,
    }
)
# A backfill run's line is a warning or an error where someone should look.
_SEVERITY = {
    facts.OUTCOME_FAILED_TERMINAL: "ERROR",
    "failed_retryable": "WARNING",
    "lease_lost": "WARNING",
    "job_not_served": "WARNING",
    "past_retention": "WARNING",
} | dict.fromkeys(LEDGER_UNAVAILABLE_OUTCOMES, "ERROR")


@dataclass
class Tally:
    """What the audit's backfill pass did, for its summary line."""

    requests_done: int = 0
    runs: int = 0  # times taken from requests
    ran: int = 0  # of those, times whose job this pass executed
    outcomes: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # why the pass stopped early, if it did

    def count(self, outcome: str) -> None:
        self.runs += 1
        self.ran += outcome in RAN_OUTCOMES
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "requests_done": self.requests_done,
            "runs": self.runs,
            "ran": self.ran,
            "outcomes": dict(self.outcomes),
            "error": self.error,
        }


@dataclass(frozen=True)
class Runner:
    """What the audit hands the backfill pass: its ledger, the run entry and the scope."""

    ledger: Ledger
    jobs: Mapping[str, object]
    identity: Callable[[str, datetime], RunIdentity]
    run: Callable[[RunIdentity, str], str]  # claims and runs one run with a trigger: its outcome
    ensure_lease: Callable[[], None]


def run_pending(docs: BackfillDocs, runner: Runner, project: str, region: str) -> Tally:
    """Run every pending request of the queue, in order; each time once, through the claim.

    A ledger that cannot be read or written stops the pass, and the tally says
    why, so the audit still logs its summary; the next audit goes on from each
    request's position.
    """
    tally = Tally()
    queue = queue_key(project, region)
    try:
        found = docs.get(queue)
        for key in [] if found is None else list(found[0].get("pending", [])):
            if _run_request(docs, runner, key, tally):
                tally.requests_done += 1
                queue_change(docs, queue, lambda keys, key=key: without_key(keys, key))
    except StoreUnavailable as exc:
        tally.error = f"{type(exc).__name__}: {exc}"
    return tally


def _run_request(docs: BackfillDocs, runner: Runner, key: str, tally: Tally) -> bool:
    """Run one request from its position; True once it is done (or gone)."""
    found = docs.get(key)
    if found is None:
        return True
    data, version = found
    if data.get("status") != PENDING:
        return True
    job, times, actions = data["job"], data["times"], data["actions"]
    outcomes: dict[str, int] = dict(data.get("outcomes", {}))
    position = int(data.get("next", 0))
    failed_attempts = data.get("failed_attempts") or [None] * len(times)
    generations = data.get("generations") or [0] * len(times)
    for index in range(position, len(times)):
        runner.ensure_lease()  # an audit that lost its run stops backfilling
        when = times[index].astimezone(UTC)
        outcome = _run_time(
            runner, job, when, actions[index], failed_attempts[index], int(generations[index])
        )
        tally.count(outcome)
        if outcome in NOT_YET_OUTCOMES:
            # Not run: the position stays, so the next audit tries this time again.
            if outcome in LEDGER_UNAVAILABLE_OUTCOMES:
                tally.error = f"{outcome} at {rfc3339(when)} of request {key}"
            return False
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        try:
            version = docs.update(key, {"next": index + 1, "outcomes": outcomes}, version)
        except VersionConflict:
            return False  # another audit moved this request on: it is that audit's now
    now = runner.ledger.now()
    try:
        docs.update(key, {"status": DONE, "done_at": now, "outcomes": outcomes}, version)
    except VersionConflict:
        return False
    log_line(
        "INFO",
        f"backfill request done: {job}, {len(times)} time(s)",
        outcome="backfill_done",
        job=job,
        request=key,
        mode=data.get("mode") or (MODE_FAILED if data.get("include_failed") else MODE_MISSING),
        newest_first=bool(data.get("newest_first")),
        trigger=TRIGGER_BACKFILL,
        outcomes=outcomes,
    )
    return True


def _run_time(
    runner: Runner,
    job: str,
    when: datetime,
    action: str,
    failed_attempt: str | None,
    generation: int,
) -> str:
    """Run one time of a request through the claim; the outcome, logged with trigger backfill.

    A rerun of a completed time runs as its generation: the same time under that
    generation's key, so the claim makes it once and the first record stays.
    """
    run = runner.identity(job, when)
    if action == ACTION_RERUN_COMPLETED:
        key = generation_key(job, run.schedule_time, run.project, run.region, generation)
        run = replace(run, key=key, generation=generation)
    ledger = runner.ledger
    if job not in runner.jobs:
        outcome = "job_not_served"
    elif when + ledger.retention - ledger.lease <= ledger.now():
        outcome = "past_retention"  # its record would expire before the run could finish
    else:
        # A planned failure, or a holder the request named that has failed since.
        if action == ACTION_RERUN_FAILED or failed_attempt is not None:
            _release_if_still_failed(ledger, run.key, failed_attempt)
        outcome = runner.run(run, TRIGGER_BACKFILL)
    log_line(
        _SEVERITY.get(outcome, "INFO"),
        f"backfill run {outcome}: {job} at {rfc3339(when)}",
        outcome=f"backfill_{outcome}",
        job=job,
        schedule_time=when.isoformat(),
        run_key=run.key,
        trigger=TRIGGER_BACKFILL,
        **({"generation": generation} if run.generation else {}),
    )
    return outcome


def _release_if_still_failed(ledger: Ledger, key: str, failed_attempt: str | None) -> None:
    """Give a failed run back, fenced, if it is still the failure the request saw."""
    seen = ledger.read_versioned(key)
    if seen is None or seen.record.status is not Status.FAILED:
        return
    if failed_attempt is None:  # a request recorded before `failed_attempts` existed
        if seen.record.trigger == TRIGGER_BACKFILL:
            return
    elif seen.record.attempt_id != failed_attempt:
        return  # failed again since the request (this backfill's own rerun): left alone
    # Changed or expired since read: the claim that follows sees what it is now.
    with contextlib.suppress(ReleaseRefused):
        ledger.release_failed(key, seen, "backfill", [])
