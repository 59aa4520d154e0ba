"""A job's active window (`startAt`/`endAt`) and each run's start lag, through the handler.

On the emulator: a delivery outside the window is answered 200 `outside_window`,
never run and never written; the handler's audit expects only the times inside
it; `ops describe` shows the window and lists next times inside it only. A
window that cannot hold a time, or a bound without an offset, stops the handler
in one line. Every claim logs `start_lag_s`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runledger.audit.expected import schedule_times
from runledger.delivery.identify import run_key
from runledger.exceptions import ConfigError
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.schedules import AUDIT_JOB_ID, audit_settings, parse_schedules
from runledger.sdk.context import RunContext
from runledger.testing import JobHarness
from tests.handler.support import (
    OPS_SCOPE,
    T0,
    FakeClock,
    deliver,
    make_app,
    ops_at,
    ops_env,
    scheduler_headers,
    settings,
)

NOW = T0 + timedelta(minutes=30)  # 2026-10-16T12:30:00Z
SCOPE = OPS_SCOPE
# 08:00Z to 10:00Z, both inside; the end is given with an offset (12:00+02:00 is 10:00Z).
WINDOW = {"startAt": "2026-10-16T08:00:00Z", "endAt": "2026-10-16T12:00:00+02:00"}


def schedules(**window: str) -> str:
    entry = {"id": "export", "schedule": "0 * * * *", "timeZone": "UTC", "retryWindowSeconds": 200}
    return json.dumps([entry | window])


class Export:
    def __init__(self) -> None:
        self.hours: list[int] = []

    def __call__(self, ctx: RunContext) -> None:
        self.hours.append(ctx.schedule_time.hour)


def windowed_app(firestore_db, job: Export, clock: FakeClock, **window: str):
    config = audit_settings({"DEDUP_SCHEDULES": schedules(**window)} | SCOPE, settings(**SCOPE))
    store = FirestoreRunStore(firestore_db, "scheduler_runs")
    return make_app(store, {"export": job}, clock, audit=config, **SCOPE), store


def key_of(hour: int) -> str:
    return run_key("export", T0.replace(hour=hour), "acme-prod", "europe-west1", manual=False)


def lines(capsys) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_a_time_outside_the_window_is_answered_2xx_never_run_nor_written(firestore_db, capsys):
    job = Export()
    clock = FakeClock(T0.replace(hour=7, second=4))
    app, store = windowed_app(firestore_db, job, clock, **WINDOW)

    for hour in (7, 11):
        answer = deliver(
            app, scheduler_headers(job="export", schedule_time=f"2026-10-16T{hour:02d}:00:00Z")
        )
        assert (answer.status, answer.outcome) == (200, "outside_window")
        assert store.get(key_of(hour)) is None
    logged = lines(capsys)
    assert [line["outcome"] for line in logged] == ["outside_window", "outside_window"]
    assert logged[0]["active_from"] == "2026-10-16T08:00:00+00:00"
    assert logged[0]["active_until"] == "2026-10-16T12:00:00+02:00"
    assert "start_lag_s" not in logged[0]
    # Both ends are inside the window.
    for hour in (8, 10):
        answer = deliver(
            app, scheduler_headers(job="export", schedule_time=f"2026-10-16T{hour:02d}:00:00Z")
        )
        assert answer.outcome == "completed"
    assert job.hours == [8, 10]


def test_each_claim_logs_its_start_lag(firestore_db, capsys):
    clock = FakeClock(T0.replace(hour=9, second=7, microsecond=250_000))
    app, _ = windowed_app(firestore_db, Export(), clock, **WINDOW)
    capsys.readouterr()

    answer = deliver(app, scheduler_headers(job="export", schedule_time="2026-10-16T09:00:00Z"))

    assert answer.outcome == "completed"
    (line,) = lines(capsys)
    assert line["start_lag_s"] == 7.25
    # A duplicate claims nothing, so it has no lag of its own.
    deliver(app, scheduler_headers(job="export", schedule_time="2026-10-16T09:00:00Z"))
    (again,) = lines(capsys)
    assert again["outcome"] == "duplicate_completed" and "start_lag_s" not in again


def test_the_audit_expects_only_the_times_inside_the_window(firestore_db, capsys):
    job = Export()
    clock = FakeClock(T0.replace(hour=7, minute=30))
    app, _ = windowed_app(firestore_db, job, clock, **WINDOW)
    # The first audit records the job's epoch: it judges times from then on.
    first = deliver(app, scheduler_headers(job=AUDIT_JOB_ID, schedule_time="2026-10-16T07:30:00Z"))
    assert first.outcome == "completed"
    clock.advance(hours=5)
    for hour in (8, 9):
        deliver(app, scheduler_headers(job="export", schedule_time=f"2026-10-16T{hour:02d}:00:00Z"))
    capsys.readouterr()

    answer = deliver(app, scheduler_headers(job=AUDIT_JOB_ID, schedule_time="2026-10-16T12:30:00Z"))

    assert (answer.status, answer.outcome) == (200, "completed")
    logged = lines(capsys)
    missed = [line["schedule_time"] for line in logged if line.get("outcome") == "run_missed"]
    assert missed == ["2026-10-16T10:00:00Z"]  # never 07:00, 11:00 or 12:00
    (summary,) = [line for line in logged if line.get("outcome") == "audit_summary"]
    assert summary["checked"] == 3


def ops(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    return ops_at(env, NOW, *args)


@pytest.fixture
def env(firestore_emulator, firestore_db) -> dict[str, str]:
    return ops_env(firestore_emulator)


def test_describe_shows_the_window_and_next_times_inside_it(env):
    open_env = env | {
        "DEDUP_SCHEDULES": schedules(startAt="2026-10-16T08:00:00Z", endAt="2026-10-16T17:00:00Z")
    }
    code, out, err = ops(open_env, "describe", "--job", "export", "--json")

    assert (code, err) == (0, "")
    view = json.loads(out)
    assert view["window"] == {
        "start_at": "2026-10-16T08:00:00Z",
        "end_at": "2026-10-16T17:00:00Z",
        "now": "open",
    }
    assert view["next"] == [f"2026-10-16T{hour}:00:00Z" for hour in range(13, 18)]
    # Only the look-back's times inside the window: 08:00 to 12:00.
    assert [item["schedule_time"][11:13] for item in view["recent"]] == [
        "12",
        "11",
        "10",
        "09",
        "08",
    ]

    code, text, _ = ops(
        env | {"DEDUP_SCHEDULES": schedules(**WINDOW)}, "describe", "--job", "export"
    )
    assert code == 0
    assert "window       2026-10-16T08:00:00Z .. 2026-10-16T10:00:00Z (closed;" in text
    assert "next 0 scheduled time(s):" in text


def test_describe_of_a_job_without_a_window_says_always(env):
    code, text, _ = ops(env | {"DEDUP_SCHEDULES": schedules()}, "describe", "--job", "export")
    assert code == 0 and "window       always (no startAt/endAt)" in text


@pytest.mark.parametrize(
    ("window", "message"),
    [
        (
            {"startAt": "2026-10-16T10:00:00Z", "endAt": "2026-10-16T12:00:00+02:00"},
            "DEDUP_SCHEDULES[0] ('export'): endAt 2026-10-16T12:00:00+02:00 is not after "
            "startAt 2026-10-16T10:00:00+00:00",
        ),
        (
            {"endAt": "2026-10-16T10:00:00"},
            "DEDUP_SCHEDULES[0] ('export'): endAt '2026-10-16T10:00:00' is not an RFC 3339 "
            "time with an offset",
        ),
        (
            {"startAt": "2026-02-30T10:00:00Z"},
            "DEDUP_SCHEDULES[0] ('export'): startAt '2026-02-30T10:00:00Z' is not a valid date",
        ),
    ],
)
def test_a_bad_window_stops_the_handler_in_one_line(window, message):
    env = {"DEDUP_SCHEDULES": schedules(**window)}
    with pytest.raises(ConfigError) as refused:
        JobHarness({"export": Export()}, env=env)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_the_job_harness_applies_the_window():
    job = Export()
    harness = JobHarness(
        {"export": job}, env={"DEDUP_SCHEDULES": schedules(endAt="2026-01-01T02:00:00Z")}
    )

    late = harness.deliver("export")  # 02:30, after the window closed

    assert (late.status, late.outcome, late.ran, late.record) == (
        200,
        "outside_window",
        False,
        None,
    )
    early = harness.deliver(
        "export", schedule_time=T0.replace(year=2026, month=1, day=1, hour=2, minute=0)
    )
    assert (early.outcome, early.ran) == ("completed", True)


def test_a_repeated_wall_time_is_in_the_window_by_its_first_instant():
    # 2026-10-25 in Berlin repeats 02:00-03:00: first 00:00-01:00Z, again 01:00-02:00Z.
    entry = {
        "id": "export",
        "schedule": "*/5 * * * *",
        "timeZone": "Europe/Berlin",
        "retryWindowSeconds": 200,
        "endAt": "2026-10-25T00:30:00Z",
    }
    (job,) = parse_schedules(json.dumps([entry]))
    start = datetime(2026, 10, 25, 0, 45, tzinfo=UTC)

    # An audit whose watermark is past the window's end still judges the repeated times
    # whose first instant was inside it: they settle from their second.
    listed = schedule_times(job, start, start + timedelta(hours=2))

    assert [run.schedule_time.strftime("%H:%M") for run in listed] == [
        f"00:{minute:02d}" for minute in range(0, 31, 5)
    ]
    assert all(len(run.instants) == 2 for run in listed)
    assert schedule_times(job, start + timedelta(hours=3), start + timedelta(hours=5)) == []
