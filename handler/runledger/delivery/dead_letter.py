"""Dead letters pushed: each final failure published once to the stack's Pub/Sub topic.

Two moments make a final failure: a run that ends failed for good (the pipeline,
right after its fenced `failed` write), and a run the audit finds `released` once
Scheduler's retries are over (retries exhausted, no catch-up that ran it). Each
is one message, with an id derived from the run key, the attempt and the kind
(`dead_letter_id`), sent as the message attribute `dead_letter_id`.

Pub/Sub has no publish-side deduplication for a plain topic: a publish whose
answer is lost may be retried and stored twice, each copy with its own server
message id. So the id consumers dedupe on is ours, and a note on the run
(`Ledger.mark_dead_lettered`, fenced by the version read before the publish)
records that the publish was answered. Before publishing, the record is read:
a note with this id means the letter went out, nothing is sent. The audit, which
judges every settled run once, sends the letter of a `failed` run whose note is
missing (the handler died between its `failed` write and the publish, or the
note's write failed), so a failure is published at least once while Pub/Sub
takes it, and a second copy, same `dead_letter_id`, only when a publish or its
note lost its answer. A publish Pub/Sub refuses past its retries is logged
(`dead_letter_unpublished`, ERROR), and the failure stays in `ops failed` and
its own alert.

The Pub/Sub client is imported on the first publish only, never on a delivery
that succeeds (`pubsub_topic`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from urllib.parse import quote

from runledger import facts
from runledger.delivery.log import log_line
from runledger.exceptions import StoreUnavailable, VersionConflict
from runledger.ledger.machine import Ledger
from runledger.ledger.record import RunRecord, Status

# What a dead letter is about (its `kind` attribute).
KIND_FAILED = "failed_terminal"  # the run failed for good (TerminalJobError)
KIND_RETRIES_EXHAUSTED = "retries_exhausted"  # released, and Scheduler's retries are over
# The record status each kind is published for: a run found otherwise has moved on.
_STATUS = {KIND_FAILED: Status.FAILED, KIND_RETRIES_EXHAUSTED: Status.RELEASED}
# The attribute consumers dedupe on: the same for every copy of one letter.
ID_ATTRIBUTE = "dead_letter_id"
# The outcomes of the lines a publish logs (the stack's dead-letters metric counts them).
OUTCOME_PUBLISHED = "dead_letter_published"
OUTCOME_UNPUBLISHED = "dead_letter_unpublished"
LOGGED_OUTCOMES = (OUTCOME_PUBLISHED, OUTCOME_UNPUBLISHED)


class Topic(Protocol):
    def publish(self, data: bytes, attributes: Mapping[str, str]) -> str:
        """Publish one message; its server message id. Raises when Pub/Sub did not take it."""


def dead_letter_id(run_key: str, attempt_id: str, kind: str) -> str:
    """The letter's id: one per attempt's final failure, whoever publishes it and how often."""
    return hashlib.sha256(f"dead-letter-v1\n{run_key}\n{attempt_id}\n{kind}".encode()).hexdigest()


def message(record: RunRecord, run_key: str, kind: str, letter_id: str, database: str) -> bytes:
    """The letter's body: what an on-call needs without opening the ledger, and where to look."""
    project = record.project
    logs = quote(f'jsonPayload.run_key="{run_key}"', safe="")
    links = {
        "logs": f"https://console.cloud.google.com/logs/query;query={logs}?project={project}",
        "scheduler_job": (
            "https://console.cloud.google.com/cloudscheduler/jobs/edit/"
            f"{record.region}/{record.job}?project={project}"
        ),
        "ledger": (
            f"https://console.cloud.google.com/firestore/databases/{quote(database, safe='')}"
            f"/data?project={project}"
        ),
    }
    body = {
        ID_ATTRIBUTE: letter_id,
        "kind": kind,
        "job": record.job,
        "schedule_time": record.schedule_time.isoformat(),
        "run_key": run_key,
        "attempt_id": record.attempt_id,
        "attempts": record.attempts,
        "error": record.error,
        "trigger": record.trigger,
        "generation": record.generation,
        "manual": record.manual,
        "links": links,
    }
    return json.dumps(body, sort_keys=True).encode()


@dataclass(frozen=True)
class DeadLetters:
    """Where a stack's dead letters go: its topic (connected on first use) and the ledger's name."""

    topic_name: str  # projects/P/topics/T
    topic: Callable[[], Topic]
    database: str = facts.DEFAULT_DATABASE

    def send(self, ledger: Ledger, run_key: str, kind: str) -> str:
        """Publish the dead letter of the run's final failure, once; the outcome for the log.

        `dead_letter_published`, `dead_letter_already_published` (its note says
        so), `dead_letter_not_final` (the run moved on: claimed again, or gone),
        or `dead_letter_unpublished` (the ledger or Pub/Sub could not be reached).
        """
        try:
            seen = ledger.read_versioned(run_key)
        except StoreUnavailable as exc:
            return _logged(OUTCOME_UNPUBLISHED, run_key, kind, None, error=str(exc))
        if seen is None:
            return "dead_letter_not_final"
        record = seen.record
        if record.status is not _STATUS[kind] or record.is_expired(ledger.now()):
            return "dead_letter_not_final"
        letter_id = dead_letter_id(run_key, record.attempt_id, kind)
        if record.dead_letter_id == letter_id:
            return "dead_letter_already_published"
        attributes = {ID_ATTRIBUTE: letter_id, "kind": kind, "job": record.job, "run_key": run_key}
        try:
            message_id = self.topic().publish(
                message(record, run_key, kind, letter_id, self.database), attributes
            )
        except Exception as exc:  # the client's errors are its own; the line says which
            error = f"{type(exc).__name__}: {exc}"
            return _logged(OUTCOME_UNPUBLISHED, run_key, kind, record, letter_id, error)
        try:
            ledger.mark_dead_lettered(run_key, seen, letter_id)
        except (VersionConflict, StoreUnavailable) as exc:
            # Published, not noted: the audit may publish it again, with the same id.
            error = f"published, not noted on the run: {type(exc).__name__}: {exc}"
            return _logged(OUTCOME_PUBLISHED, run_key, kind, record, letter_id, error)
        return _logged(OUTCOME_PUBLISHED, run_key, kind, record, letter_id, message_id=message_id)


def _logged(
    outcome: str,
    run_key: str,
    kind: str,
    record: RunRecord | None,
    letter_id: str | None = None,
    error: str | None = None,
    message_id: str | None = None,
) -> str:
    severity = "ERROR" if outcome == OUTCOME_UNPUBLISHED else "INFO"
    if error is not None and severity == "INFO":
        severity = "WARNING"
    when: datetime | None = None if record is None else record.schedule_time
    log_line(
        severity,
        f"dead letter {outcome.removeprefix('dead_letter_')}: {kind} of run {run_key}",
        outcome=outcome,
        kind=kind,
        run_key=run_key,
        job=None if record is None else record.job,
        schedule_time=None if when is None else when.isoformat(),
        dead_letter_id=letter_id,
        message_id=message_id,
        error=error,
    )
    return outcome
