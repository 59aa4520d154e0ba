"""The handler's audit after its own state is lost, on the emulator: no due time goes unjudged.

Deleting runledger_audit (epochs, watermarks, slots) and an audit dying after
its watermark write are the two ways the audit's state can fall behind what it
judged; neither may leave a time in silence, nor report a time that ran.
"""

from __future__ import annotations

from datetime import timedelta

from runledger.exceptions import StoreUnavailable
from runledger.ledger.firestore_store import AUDIT_COLLECTION, FirestoreRunStore
from runledger.ledger.watermarks import shard_key
from runledger.schedules import AUDIT_JOB_ID
from tests.handler.support import T0, FakeClock, deliver, scheduler_headers
from tests.handler.test_audit import move_to, stamp
from tests.handler.test_audit_watermark import (
    MISSED,
    audit_delivery,
    hourly_app,
    reported,
    run_hours,
    summary_of,
)


def test_deleting_runledger_audit_still_reports_a_time_missed_before_it(
    firestore_store, firestore_db, capsys
):
    clock = FakeClock(T0 - timedelta(hours=10))
    app, _ = hourly_app(firestore_store, clock)
    run_hours(app, clock, range(2, 9))
    move_to(clock, T0.replace(hour=8, minute=30))
    first = audit_delivery(app, clock, capsys)
    assert (reported(first), summary_of(first)["checked"] > 0) == ([], True)
    run_hours(app, clock, range(9, 12), skip={MISSED})
    move_to(clock, T0.replace(hour=9, minute=30))
    # 09:00 is due but not yet judged when the operator deletes the audit's documents.
    firestore_db.recursive_delete(firestore_db.collection(AUDIT_COLLECTION))
    move_to(clock, T0 + timedelta(minutes=1))

    lines = audit_delivery(app, clock, capsys)

    # Judged again from the job's epoch: the missed time is reported, the runs that ran are not.
    assert reported(lines) == [("run_missed", "etl-03", "2026-10-16T09:00:00Z")]


class LostShardAnswer(FirestoreRunStore):
    """The first write of etl-03's watermark lands, then its answer is lost (a dropped link)."""

    lost = False

    def _lose(self, key, version):
        if not self.lost and key == shard_key("acme-prod", "europe-west1", MISSED[0]):
            self.lost = True
            raise StoreUnavailable("Firestore unavailable: DeadlineExceeded")
        return version

    def create_shard(self, key, shard):
        return self._lose(key, super().create_shard(key, shard))

    def replace_shard(self, key, shard, version):
        return self._lose(key, super().replace_shard(key, shard, version))


def test_an_audit_whose_watermark_answer_is_lost_has_logged_its_findings_first(
    firestore_db, capsys
):
    store = LostShardAnswer(firestore_db, "scheduler_runs")
    clock = FakeClock(T0 - timedelta(hours=6))
    app, _ = hourly_app(store, clock)
    run_hours(app, clock, range(7, 12), skip={MISSED})
    move_to(clock, T0 + timedelta(minutes=1))
    capsys.readouterr()

    answer = deliver(
        app, scheduler_headers(job=AUDIT_JOB_ID, schedule_time=stamp(clock().replace(second=0)))
    )

    # The audit fails (released for Scheduler's retry), but its finding went out first.
    assert (answer.status, answer.outcome) == (500, "failed_retryable")
    assert store.lost
    out = capsys.readouterr().out
    assert '"outcome": "run_missed"' in out and "2026-10-16T09:00:00Z" in out
    # The watermark did move: the next audit shows the finding open, and logs nothing twice.
    clock.advance(seconds=120)
    later = audit_delivery(app, clock, capsys)
    assert reported(later) == []
    assert summary_of(later)["open_findings"] == [
        {"job": "etl-03", "schedule_time": "2026-10-16T09:00:00Z", "finding": "missed"}
    ]
