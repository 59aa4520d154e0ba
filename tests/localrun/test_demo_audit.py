"""The demo's audit settings are ones the handler accepts, and its check of the findings bites."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runledger.audit.findings import Finding
from runledger.config import Settings
from runledger.schedules import audit_settings
from scheduler_dedup.localrun.demo_audit import check_findings, late_runs, read_log, settled_by
from scheduler_dedup.localrun.demo_stack import DemoFiles, handler_env, sim_jobs, speedups
from scheduler_dedup.localrun.simulator import RunPlan, replayed_since
from tests.localrun.demo_project import demo_stack

NOW = datetime(2026, 11, 30, 12, 30, tzinfo=UTC)
MISSED = "hourly-sync@2026-11-30T10:05:00Z"
RELEASED = "hourly-sync@2026-11-30T11:05:00Z"


def _env(catch_up: bool) -> dict[str, str]:
    config = demo_stack()
    speedup = speedups(config)
    jobs = sim_jobs(config, speedup)
    files = DemoFiles(Path("plan"), Path("events"), Path("outage"))
    since = replayed_since(jobs, NOW, 8)
    plans = [RunPlan(job.id, NOW - timedelta(days=12), False, None, ()) for job in jobs]
    return handler_env(config, speedup, plans, NOW, files, audit_since=since, catch_up=catch_up).env


@pytest.mark.parametrize("catch_up", [False, True])
def test_the_handler_accepts_the_demos_schedules_and_window(catch_up: bool) -> None:
    env = _env(catch_up)
    audit = audit_settings(env, Settings.from_env(env))
    config = demo_stack()
    assert [s.id for s in audit.schedules] == [job.id for job in config.jobs]
    assert all(s.catch_up is catch_up for s in audit.schedules)
    # hourly-sync replays 8 runs: the window reaches back to the 9th, not beyond.
    assert timedelta(hours=8) <= audit.lookback < timedelta(hours=9)
    # Compressed: a replayed run is judged seconds after the simulator gave up on it.
    assert all(s.retry_window <= timedelta(seconds=30) for s in audit.schedules)


def test_settled_by_follows_the_handlers_rule() -> None:
    env = _env(False)
    plan = RunPlan("hourly-sync", NOW, False, None, ())
    settles = settled_by([plan], env)
    assert NOW + timedelta(seconds=15) < settles < NOW + timedelta(seconds=60)


def test_runs_that_came_due_during_the_demo_are_delivered_late() -> None:
    config = demo_stack()
    jobs = sim_jobs(config, speedups(config))
    late = late_runs(jobs, NOW, NOW + timedelta(minutes=40))
    assert [(p.job, p.schedule_time) for p in late] == [
        ("hourly-sync", datetime(2026, 11, 30, 13, 5, tzinfo=UTC))
    ]
    assert late_runs(jobs, NOW, NOW + timedelta(minutes=30)) == []


def _line(outcome: str, when: str, catch_up: str | None = None) -> str:
    entry = {"outcome": outcome, "job": "hourly-sync", "schedule_time": when}
    if catch_up:
        entry["catch_up"] = catch_up
    return json.dumps(entry)


LOG = [
    "[INFO] Booting worker with pid: 12",
    _line("run_missed", "2026-11-30T10:05:00Z", "completed"),
    _line("run_released", "2026-11-30T11:05:00Z", "completed"),
    json.dumps({"outcome": "completed", "job": "hourly-sync"}),
    json.dumps({"outcome": "audit_summary", "findings": 2}),
]
EXPECTED = {MISSED: Finding.MISSED, RELEASED: Finding.RELEASED}


def test_the_findings_are_read_from_the_handlers_log_lines() -> None:
    findings, summary = read_log(LOG)
    assert [(f.label, f.finding, f.catch_up) for f in findings] == [
        (MISSED, Finding.MISSED, "completed"),
        (RELEASED, Finding.RELEASED, "completed"),
    ]
    assert summary == {"outcome": "audit_summary", "findings": 2}
    assert check_findings(EXPECTED, findings, catch_up=True) == []


def test_an_unreported_a_misjudged_and_an_unexpected_finding_are_all_problems() -> None:
    findings, _ = read_log(
        [
            _line("run_stale", "2026-11-30T10:05:00Z"),
            _line("run_missed", "2026-11-30T12:05:00Z"),
        ]
    )
    problems = check_findings(EXPECTED, findings, catch_up=False)
    assert problems == [
        f"{MISSED}: reported stale, expected missed",
        f"{RELEASED}: released but the audit did not report it",
        "hourly-sync@2026-11-30T12:05:00Z: reported missed, but it succeeded",
    ]


def test_with_catch_up_a_finding_the_audit_did_not_finish_is_a_problem() -> None:
    findings, _ = read_log(
        [
            _line("run_missed", "2026-11-30T10:05:00Z", "completed"),
            _line("run_released", "2026-11-30T11:05:00Z", "failed_retryable"),
        ]
    )
    assert check_findings(EXPECTED, findings, catch_up=True) == [
        f"{RELEASED}: catch-up answered failed_retryable"
    ]


def test_the_demos_handler_keeps_each_jobs_overlap_policy_from_the_stack() -> None:
    """The demo models the deployed handler: a stack's `overlap: delay` job is a delay job."""
    config = demo_stack()
    first = config.jobs[0]
    config = replace(config, jobs=(replace(first, overlap="delay"), *config.jobs[1:]))
    speedup = speedups(config)
    jobs = sim_jobs(config, speedup)
    files = DemoFiles(Path("plan"), Path("events"), Path("outage"))
    plans = [RunPlan(job.id, NOW - timedelta(days=12), False, None, ()) for job in jobs]
    env = handler_env(
        config, speedup, plans, NOW, files, audit_since=replayed_since(jobs, NOW, 8), catch_up=False
    ).env
    overlaps = {s.id: s.overlap for s in audit_settings(env, Settings.from_env(env)).schedules}
    assert overlaps[first.id] == "delay"
    assert set(overlaps.values()) == {"delay", "allow"}
