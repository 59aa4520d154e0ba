"""Short listing windows, as the audit takes them from a watermark, across clock changes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from runledger.audit import expected
from runledger.schedules import parse_schedules


def job(schedule: str, zone: str):
    raw = [{"id": "etl", "schedule": schedule, "timeZone": zone, "retryWindowSeconds": 200}]
    return parse_schedules(json.dumps(raw))[0]


@pytest.mark.parametrize(
    ("schedule", "zone", "day"),
    [
        ("*/5 * * * *", "UTC", datetime(2026, 10, 16, tzinfo=UTC)),
        ("*/15 * * * *", "America/New_York", datetime(2026, 11, 1, 3, tzinfo=UTC)),
        ("30 * * * *", "America/New_York", datetime(2026, 3, 8, 3, tzinfo=UTC)),
        ("*/20 1-3 * * *", "Europe/Berlin", datetime(2026, 10, 25, tzinfo=UTC)),
        ("0,30 * * * *", "Australia/Lord_Howe", datetime(2026, 4, 4, 12, tzinfo=UTC)),
    ],
)
def test_every_short_window_lists_what_the_full_scan_lists(schedule, zone, day, monkeypatch):
    listed = job(schedule, zone)
    windows = [
        (day + timedelta(minutes=7 * step), day + timedelta(minutes=7 * step + length))
        for step in range(0, 8 * 60 // 7)
        for length in (5, 39, 90)
    ]
    fast = [expected.schedule_times(listed, start, end) for start, end in windows]
    monkeypatch.setattr(expected, "_scan_margin", lambda *_: expected._MAX_OFFSET_CHANGE)
    full = [expected.schedule_times(listed, start, end) for start, end in windows]
    assert fast == full
    assert any(fast)  # the windows did hold runs
