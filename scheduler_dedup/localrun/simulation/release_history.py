"""The oracle's rules for the operator's `ops release` of a failed run (`ops_release`).

The world tells `Releases` each release the operator confirmed: the record as the
operator read it, the record as it stood just before the write, and the records
the write left (none: refused). The rules, each a violation when broken
(docs/reliability.md, "The oracle"):

    released a run not failed     a release landed on a run that was not failed
    refused release changed it    a release refused (the run moved on) wrote anyway
    released run ran twice        an effect after the completion recorded since its release
    released, then silent         after a release, no attempt ran and no finding named it
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runledger.ledger.machine import MAX_CLOCK_SKEW
from runledger.ledger.record import RunRecord, Status
from scheduler_dedup.localrun.simulation.violation import Violation

# A finding (its dating, job, time, outcome, catch-up), as `oracle.History.findings` holds it.
Finding = tuple[datetime, str, datetime | None, str, Any]


@dataclass(frozen=True)
class Release:
    """One confirmed `ops release`: when, of which run, what it saw, and what it did."""

    at: datetime
    key: str
    seen: RunRecord
    before: RunRecord | None  # the record just before the write, by the store itself
    written: tuple[RunRecord, ...]  # what the release wrote (empty: nothing)
    answer: str  # what the operator's terminal said


class Releases:
    def __init__(self) -> None:
        self.confirmed: list[Release] = []

    def confirm(self, release: Release) -> None:
        self.confirmed.append(release)

    def check(
        self,
        executions: Mapping[str, Sequence[Any]],
        records: Mapping[str, Sequence[tuple[datetime, RunRecord | None]]],
        findings: Sequence[Finding],
        excused: Callable[[str, str, datetime], bool],
    ) -> list[Violation]:
        """Every broken release rule.

        `excused(key, job, time)`: whether the oracle takes the time as deliberately not
        run or reported otherwise (its job paused or drifted then, its record not run).
        """
        found: list[Violation] = []
        landed: dict[str, list[datetime]] = {}
        for release in self.confirmed:
            job, when = release.seen.job, release.seen.schedule_time

            def violation(rule: str, detail: str, job: str = job, when: datetime = when) -> None:
                found.append(Violation(job, when, rule, detail))

            released = [r for r in release.written if r.status is Status.RELEASED]
            if not released:
                continue
            landed.setdefault(release.key, []).append(release.at)
            status = "gone" if release.before is None else release.before.status.value
            if release.before is not None and release.before != release.seen:
                violation(
                    "refused release changed it",
                    f"a release at {release.at:%H:%M:%S} of attempt {release.seen.attempt_id}'s "
                    f"failed record landed on a record {status} ({release.before.attempt_id}) "
                    "it never read",
                )
            elif release.before is None or release.before.status is not Status.FAILED:
                violation(
                    "released a run not failed",
                    f"a release at {release.at:%H:%M:%S} landed on a run {status}",
                )
        for key, times in landed.items():
            runs = sorted(executions.get(key, ()), key=lambda e: e.start)
            for index, at in enumerate(times):
                until = times[index + 1] if index + 1 < len(times) else None
                inside = [e for e in runs if e.start >= at and (until is None or e.start < until)]
                effects = [e for e in inside if e.effect_at is not None]
                job, when = _moment(self.confirmed, key)
                completed = [
                    when
                    for when, r in records.get(key, ())
                    if when >= at and r is not None and r.status is Status.COMPLETED
                ]
                for later in effects[1:]:
                    if not any(done < later.start for done in completed):
                        continue  # its completion never recorded: at least once, as designed
                    found.append(
                        Violation(
                            job,
                            when,
                            "released run ran twice",
                            f"attempt {later.attempt_id} took effect at "
                            f"{later.effect_at:%H:%M:%S} after the completion recorded since "
                            f"the release at {at:%H:%M:%S}",
                        )
                    )
                # A finding is dated by its audit's window end less the skew margin, so
                # an audit that read the released record may date its finding up to that
                # margin before the release (seed 917).
                reported = any(
                    at - MAX_CLOCK_SKEW <= dated and j == job and w == when
                    for dated, j, w, _, _ in findings
                )
                if not (inside or reported or excused(key, job, when)):
                    found.append(
                        Violation(
                            job,
                            when,
                            "released, then silent",
                            f"released at {at:%H:%M:%S}: no attempt since, no finding names it",
                        )
                    )
        return found


def _moment(releases: Sequence[Release], key: str) -> tuple[str, datetime]:
    seen = next(release.seen for release in releases if release.key == key)
    return seen.job, seen.schedule_time
