"""Backfill requests as stored: keyed by what they ask, listed in one queue per scope.

The request document is keyed by what it asks (`request_key`), so the same
backfill recorded twice is one request; a queue document (`queue_key`) lists
the pending ones, so the handler's audit finds them by key. Every write is
fenced: a create fails on a taken key, an update on a changed version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from runledger.audit.findings import rfc3339
from runledger.backfill.plan import MODE_FAILED, MODE_MISSING, PlannedRun
from runledger.exceptions import RecordExists, StoreUnavailable, VersionConflict

if TYPE_CHECKING:
    from runledger.config import Settings

PENDING, DONE = "pending", "done"
# Rounds of read-then-write on the queue while other writers keep changing it.
_QUEUE_ROUNDS = 5


class BackfillDocs(Protocol):
    """Read, create and compare-and-set plain documents by key (`backfill.firestore_store`)."""

    def get(self, key: str) -> tuple[dict[str, Any], Any] | None:
        """The document and its version, or None."""

    def create(self, key: str, data: Mapping[str, Any]) -> Any:
        """Write a new document, return its version; RecordExists if the key is taken."""

    def update(self, key: str, changes: Mapping[str, Any], version: Any) -> Any:
        """Change fields if still at `version`, return the new one; VersionConflict if not."""


def firestore_backfills(settings: Settings) -> Callable[[], BackfillDocs]:
    """The handler's backfill documents, in its ledger's database; connects on first use.

    Google's client is imported only then, never on a delivery's path.
    """
    made: list[BackfillDocs] = []

    def docs() -> BackfillDocs:
        if not made:
            from google.cloud import firestore

            from runledger.backfill.firestore_store import FirestoreBackfills

            client = firestore.Client(database=settings.database)
            made.append(FirestoreBackfills(client, settings.collection))
        return made[0]

    return docs


def request_key(
    project: str,
    region: str,
    job: str,
    start: datetime,
    end: datetime,
    mode: str,
    newest_first: bool = False,
    runs: Sequence[PlannedRun] = (),
) -> str:
    """The request's document id: the same backfill asked twice is the same document.

    `missing` and `failed` oldest first keep the id they had as `--include-failed`
    False and True. Reruns of completed times (`all`) add their generations, so
    the same `all` asked again after its reruns ran is a new request (the next
    generation), while asked again before they ran it is the same one.
    """
    asked = str(mode != MODE_MISSING) if mode in (MODE_MISSING, MODE_FAILED) else mode
    canonical = ["backfill-v1", project, region, job, rfc3339(start), rfc3339(end), asked]
    if newest_first:
        canonical.append("newest-first")
    canonical += [
        f"{rfc3339(run.schedule_time)}#{run.generation}" for run in runs if run.generation
    ]
    return hashlib.sha256("\n".join(canonical).encode()).hexdigest()


def queue_key(project: str, region: str) -> str:
    """The queue document's id: one per scope the handler serves."""
    return "queue-" + hashlib.sha256(f"{project}\n{region}".encode()).hexdigest()[:32]


def request_document(
    job: str,
    start: datetime,
    end: datetime,
    mode: str,
    runs: Sequence[PlannedRun],
    now: datetime,
    requested_by: str,
    newest_first: bool = False,
) -> dict[str, Any]:
    """The request as stored: its times in the order to run, each with its action, and where
    it stands. `include_failed` stays for readers of requests older than `mode`."""
    return {
        "job": job,
        "start": start,
        "end": end,
        "mode": mode,
        "newest_first": newest_first,
        "include_failed": mode != MODE_MISSING,
        "times": [run.schedule_time for run in runs],
        "actions": [run.action for run in runs],
        "failed_attempts": [run.failed_attempt for run in runs],
        "generations": [run.generation for run in runs],
        "requested_at": now,
        "requested_by": requested_by,
        "status": PENDING,
        "next": 0,
        "outcomes": {},
    }


def queue_change(docs: BackfillDocs, key: str, change: Callable[[list[str]], list[str]]) -> None:
    """Apply `change` to the queue's pending list, compare-and-set, until it sticks."""
    for _ in range(_QUEUE_ROUNDS):
        found = docs.get(key)
        if found is None:
            pending = change([])
            if not pending:
                return
            try:
                docs.create(key, {"pending": pending})
            except RecordExists:
                continue
            return
        data, version = found
        before = list(data.get("pending", []))
        after = change(before)
        if after == before:
            return
        try:
            docs.update(key, {"pending": after}, version)
        except VersionConflict:
            continue
        return
    raise StoreUnavailable(f"backfill queue {key} kept changing under concurrent writers")


def record_request(
    docs: BackfillDocs, project: str, region: str, key: str, document: Mapping[str, Any]
) -> tuple[bool, dict[str, Any]]:
    """Create the request (or find it) and make sure a pending one is queued.

    Returns whether this call created it, and the stored request. A request
    found already pending is queued again (a CLI that stopped between the two
    writes); one found done is left as it is.
    """
    created = True
    try:
        docs.create(key, document)
        stored = dict(document)
    except RecordExists:
        created = False
        found = docs.get(key)
        if found is None:
            raise StoreUnavailable(f"backfill request {key} vanished while read") from None
        stored = found[0]
    if stored.get("status") == PENDING:
        queue_change(docs, queue_key(project, region), lambda keys: with_key(keys, key))
    return created, stored


def pending_requests(
    docs: BackfillDocs, project: str, region: str, job: str
) -> list[dict[str, Any]]:
    """`job`'s requests still queued, oldest asked first, as `ops describe` shows them."""
    found = docs.get(queue_key(project, region))
    shown = []
    for key in [] if found is None else found[0].get("pending", []):
        request = docs.get(key)
        if request is None or request[0].get("job") != job:
            continue
        data = request[0]
        mode = data.get("mode") or (MODE_FAILED if data.get("include_failed") else MODE_MISSING)
        shown.append(
            {
                "request": key,
                "mode": mode,
                "newest_first": bool(data.get("newest_first")),
                "from": rfc3339(data["start"]),
                "to": rfc3339(data["end"]),
                "taken": int(data.get("next", 0)),
                "times": len(data.get("times", [])),
                "requested_by": data.get("requested_by"),
            }
        )
    return shown


def with_key(keys: list[str], key: str) -> list[str]:
    return keys if key in keys else [*keys, key]


def without_key(keys: list[str], key: str) -> list[str]:
    return [item for item in keys if item != key]
