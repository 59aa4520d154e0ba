"""What the operator CLI (`python -m runledger.ops`) prints: tables for people, JSON for scripts.

Kept apart from the commands so `ops.py` reads as what each command does, and
every command shares one way of showing times, errors and runs.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import IO, Any

from runledger.audit.findings import AuditReport, rfc3339
from runledger.ledger.record import RunRecord, Status
from runledger.ops.ledger_ops import ReleasePlan, RunRow


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).isoformat(timespec="seconds")


def one_line(text: str | None, width: int = 80) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _record_json(key: str, record: RunRecord) -> dict[str, Any]:
    data = record.to_document()
    for name, value in data.items():
        if isinstance(value, datetime):
            data[name] = _when(value)
    return {"key": key, **data}


class Printer:
    def __init__(self, out: IO[str], as_json: bool, now: datetime) -> None:
        self._out = out
        self._json = as_json
        self._now = now

    def line(self, text: str = "") -> None:
        print(text, file=self._out)

    def rows(self, rows: list[RunRow], limit: int, empty: str) -> None:
        shown = rows[: max(limit, 0)]
        if self._json:
            # One JSON list (`[]` when nothing matches), like `audit --json`.
            self.line(json.dumps([_record_json(row.key, row.record) for row in shown]))
            return
        if not rows:
            self.line(empty)
            return
        self.line(f"{'KEY':<16} {'JOB':<24} {'SCHEDULED':<25} {'STATUS':<11} TRIES  DETAIL")
        for row in shown:
            record = row.record
            self.line(
                f"{row.key[:16]:<16} {record.job[:24]:<24} {_when(record.schedule_time):<25} "
                f"{record.status.value:<11} {record.attempts:>5}  {self._detail(record)}"
            )
        if len(rows) > len(shown):
            self.line(f"... {len(rows) - len(shown)} more (raise --limit)")

    def _detail(self, record: RunRecord) -> str:
        if record.status is Status.IN_PROGRESS:
            if record.lease_expires <= self._now:
                return f"lease ran out {_when(record.lease_expires)}"
            return f"lease until {_when(record.lease_expires)}"
        if record.yielded_to is not None:
            return f"yielded to run {record.yielded_to[:16]} (overlap: skip)"
        return one_line(record.error) or f"finished {_when(record.finished_at)}"

    def run(self, row: RunRow, items: list[Any]) -> None:
        if self._json:
            data = _record_json(row.key, row.record)
            data["work"] = [
                {
                    "kind": item.kind.value,
                    "name": item.name,
                    "attempt_id": item.attempt_id,
                    "written_at": _when(item.written_at),
                    "value": item.value,
                }
                for item in items
            ]
            self.line(json.dumps(data, default=str))
            return
        for name, value in _record_json(row.key, row.record).items():
            self.line(f"{name:<14} {value}")
        self.line(f"{'work':<14} {len(items)} item(s)")
        for item in items:
            value = one_line(json.dumps(item.value, default=str), 60)
            self.line(
                f"  {item.kind.value:<10} {item.name:<24} {_when(item.written_at)} "
                f"{item.attempt_id}  {value}"
            )


def describe_release(plan: ReleasePlan) -> str:
    record = plan.row.record
    text = (
        f"release run {plan.row.key} ({record.job} at {_when(record.schedule_time)}, "
        f"failed: {one_line(record.error, 60)}): status failed -> released"
    )
    if plan.checkpoints:
        text += f", delete checkpoints {', '.join(plan.checkpoints)}"
    return text


def print_audit(report: AuditReport, as_json: bool, out: IO[str]) -> None:
    if as_json:
        print(json.dumps([item.to_json() for item in report.findings]), file=out)
        return
    if report.findings:
        print(f"{'JOB':<24} {'SCHEDULED':<21} {'FINDING':<11} DETAIL", file=out)
    for item in report.findings:
        if item.schedule_time is None:
            print(f"{item.job[:24]:<24} {'-':<21} {item.finding.value:<11} {item.detail}", file=out)
            continue
        detail = "no run on record"
        if item.record is not None:
            detail = f"{item.record.attempts} attempt(s)"
            if item.record.error:
                detail += f": {one_line(item.record.error, 60)}"
        print(
            f"{item.job[:24]:<24} {rfc3339(item.schedule_time):<21} "
            f"{item.finding.value:<11} {detail}",
            file=out,
        )
    for item in report.paused:
        print(f"paused (not run, not a finding): {item.describe()}", file=out)
    print(
        f"{len(report.findings)} finding(s) in {report.checked} settled scheduled run(s) of "
        f"{report.jobs} job(s), {rfc3339(report.window_start)} to {rfc3339(report.window_end)}; "
        f"{report.job_states}; {report.paused_runs} of paused jobs not run; "
        f"{report.pending} still inside their retry window; {report.before_epoch} before "
        f"their job's audit epoch; {report.reads} document read(s)",
        file=out,
    )
