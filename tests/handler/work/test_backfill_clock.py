"""`backfill --include-failed` decides which failure it reruns from the ledger alone.

The operator's laptop and the handler keep different clocks. The request names
the failed attempt it saw for each time (`failed_attempts`), and the audit
releases a failure only while its record is still that attempt's: a failure
recorded by a handler whose clock runs ahead of the laptop is rerun, and a
failure of the backfill's own rerun is not, whatever either clock says.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from runledger.ledger.record import Status
from tests.handler.support import RETENTION, T0, FakeClock, run_record
from tests.handler.work.test_ops_backfill import (  # noqa: F401 (fixtures)
    NOW,
    Jobs,
    audited_app,
    env,
    key_of,
    ops,
    run_audit,
    summary,
)

WINDOW = ["--job", "export", "--from", "2026-10-16T07:00:00Z", "--to", "2026-10-16T08:00:00Z"]


def test_a_failure_recorded_on_a_clock_ahead_of_the_operators_is_rerun(env, firestore_db, capsys):
    from runledger.ledger.firestore_store import FirestoreRunStore

    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    when = T0.replace(hour=7)
    # The handler's clock is 10 minutes ahead of the laptop's: its failure is stamped after
    # the moment the operator's clock gives the request.
    failed = run_record(
        "seed-7",
        Status.FAILED,
        job="export",
        schedule_time=when,
        claimed_at=NOW + timedelta(minutes=9),
        finished_at=NOW + timedelta(minutes=10),
        expire_at=when + RETENTION,
        error="partner API down",
    )
    store.create(key_of(7), failed)
    code, out, err = ops(env, "backfill", *WINDOW, "--include-failed")
    assert (code, err) == (0, "")
    jobs = Jobs()
    app = audited_app(firestore_db, jobs, FakeClock(NOW + timedelta(minutes=11)))
    backfill = summary(run_audit(app, capsys))["backfill"]
    assert backfill["outcomes"] == {"completed": 1}
    assert jobs.runs == Counter({7: 1})
    assert store.get(key_of(7)).record.status is Status.COMPLETED
