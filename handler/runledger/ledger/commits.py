"""The seam between the ledger's state machine and the overlap policy: where a run's writes go.

A run of a job with `allow` writes its record alone (`RecordCommits`); one of a
job with a policy writes its job's slot in the same commits
(`ledger.overlap.SlotCommits`). The ledger calls nothing else to write a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from runledger.facts import OVERLAP_ALLOW
from runledger.ledger.record import RunRecord
from runledger.ledger.run import RunIdentity
from runledger.ledger.store import RunStore


@dataclass(frozen=True)
class Gate:
    """What a claim found in its job's overlap slot: the other run holding it, if running.

    `token` is what the claim's commit needs of the slot (`Commits.claim`).
    """

    holder_key: str | None = None
    holder: RunRecord | None = None
    token: Any = None


class Commits(Protocol):
    """Where a run's writes go: its record alone, or with its job's slot (`ledger.overlap`).

    The one seam between the state machine and the overlap policy: every claim
    and every fenced write of a run goes through it, so the slot's life is the
    record's, commit for commit.
    """

    def policy(self, job: str) -> str:
        """The job's overlap policy (facts.OVERLAP_POLICIES)."""

    def look(self, run: RunIdentity, now: datetime) -> Gate:
        """Read what the claim must respect before its commit."""

    def claim(self, run: RunIdentity, record: RunRecord, version: Any | None, gate: Gate) -> Any:
        """Create (version None) or replace the record; RecordExists/VersionConflict if refused."""

    def fenced(
        self, run: RunIdentity, changes: Mapping[str, Any], version: Any, record: RunRecord
    ) -> Any:
        """Change the run at `version` (`record`: the result); VersionConflict if it moved on."""


class RecordCommits:
    """A run's writes on its record alone: every job with `allow`."""

    def __init__(self, store: RunStore) -> None:
        self._store = store

    def policy(self, job: str) -> str:
        return OVERLAP_ALLOW

    def look(self, run: RunIdentity, now: datetime) -> Gate:
        return Gate()

    def claim(self, run: RunIdentity, record: RunRecord, version: Any | None, gate: Gate) -> Any:
        if version is None:
            return self._store.create(run.key, record)
        return self._store.update(run.key, record.to_document(), version)

    def fenced(
        self, run: RunIdentity, changes: Mapping[str, Any], version: Any, record: RunRecord
    ) -> Any:
        return self._store.update(run.key, changes, version)
