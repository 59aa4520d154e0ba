"""The audit's evidence of pauses, through the HTTP handler on the emulator, with the real
Scheduler lister reading a stand-in for Google's REST APIs.

The stand-in answers `jobs.list` with each job as its calls left it, and
`entries.list` with the calls' audit log entries that the request's filter
selects, evaluated clause by clause as Cloud Logging does: an entry the
filter does not ask for never reaches the audit, as in production.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runledger.audit.scheduler_state import scheduler_lister
from runledger.ledger.epochs import record_epochs
from runledger.schedules import audit_settings
from runledger.service.app import App
from tests.handler.support import FakeClock, deliver, make_app, scheduler_headers, settings
from tests.handler.test_audit_live import audit_lines, move_to, stamp, summary_of

PROJECT, REGION = "acme-prod", "europe-west1"
SCOPE = {"DEDUP_ALLOWED_PROJECTS": PROJECT, "DEDUP_ALLOWED_REGIONS": REGION}
PARENT = f"projects/{PROJECT}/locations/{REGION}"
START = datetime(2026, 10, 16, 0, 0, tzinfo=UTC)
HOURLY = {"schedule": "0 * * * *", "timeZone": "UTC", "retryWindowSeconds": 200}
# An hourly job that catches its missed times up for six hours.
CATCHING_UP = {"id": "etl", **HOURLY, "catchUp": True, "catchUpMaxAgeSeconds": 6 * 3600}


class Answer:
    def __init__(self, body: dict[str, Any]) -> None:
        self.status_code = 200
        self._body = body

    def json(self) -> dict[str, Any]:
        return self._body


class GoogleApis:
    """Scheduler's jobs and every PauseJob/ResumeJob (UpdateJob) call on them, each through an
    API version; an UpdateJob's schedule is not kept: the listing shows the job as deployed."""

    def __init__(self, clock: FakeClock, *jobs: str) -> None:
        self.clock = clock
        self.jobs = jobs
        self.calls: list[tuple[str, datetime, str, str]] = []  # job, at, method, version
        self.unlogged: set[datetime] = set()  # calls whose log entry never arrives
        self.lags: dict[datetime, timedelta] = {}  # calls whose entry is readable only later

    def call(
        self,
        job: str,
        at: datetime,
        method: str,
        version: str = "v1",
        logged=True,
        lag: timedelta = timedelta(0),
    ):
        self.calls.append((job, at, method, version))
        self.lags[at] = lag
        if not logged:
            self.unlogged.add(at)
        return self

    def session(self, credentials: object) -> GoogleApis:
        return self

    def get(self, url: str, params: dict[str, str], timeout: float) -> Answer:
        assert url.endswith(f"/v1/{PARENT}/jobs")
        now = self.clock()
        listed = []
        for job in self.jobs:
            made = sorted((at, method) for name, at, method, _ in self.calls if name == job)
            made = [m for at, m in made if at <= now and m in ("PauseJob", "ResumeJob")]
            state = "PAUSED" if made and made[-1] == "PauseJob" else "ENABLED"
            listed.append({"name": f"{PARENT}/jobs/{job}", "state": state, "schedule": "0 * * * *"})
        return Answer({"jobs": listed})

    def post(self, url: str, json: dict[str, Any], timeout: float) -> Answer:
        assert url == "https://logging.googleapis.com/v2/entries:list"
        assert json["resourceNames"] == [f"projects/{PROJECT}"]
        now = self.clock()
        entries = [
            self._entry(job, at, method, version)
            for job, at, method, version in self.calls
            if at + self.lags[at] <= now and at not in self.unlogged
        ]
        chosen = [entry for entry in entries if matches(json["filter"], entry)]
        return Answer({"entries": sorted(chosen, key=lambda entry: entry["timestamp"])})

    @staticmethod
    def _entry(job: str, at: datetime, method: str, version: str) -> dict[str, Any]:
        return {
            "timestamp": stamp(at),
            "logName": f"projects/{PROJECT}/logs/cloudaudit.googleapis.com%2Factivity",
            "resource": {
                "type": "cloud_scheduler_job",
                "labels": {"job_id": job, "location": REGION, "project_id": PROJECT},
            },
            "protoPayload": {
                "serviceName": "cloudscheduler.googleapis.com",
                "methodName": f"google.cloud.scheduler.{version}.CloudScheduler.{method}",
                "resourceName": f"{PARENT}/jobs/{job}",
            },
        }


_COMPARISON = re.compile(r'^([\w.]+)\s*(=|>=)\s*"([^"]*)"$')


def matches(query: str, entry: dict[str, Any]) -> bool:
    """Whether `entry` passes a Logging query of `A AND B` clauses, each a comparison
    (`field="v"`, `field>="v"`) or a parenthesised `OR` of comparisons."""
    for clause in query.split(" AND "):
        options = clause.strip().removeprefix("(").removesuffix(")").split(" OR ")
        if not any(_compare(option.strip(), entry) for option in options):
            return False
    return True


def _compare(comparison: str, entry: dict[str, Any]) -> bool:
    found = _COMPARISON.match(comparison)
    assert found, f"the stand-in does not know {comparison!r}"
    path, operator, wanted = found.groups()
    value: Any = entry
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if operator == ">=":
        return value is not None and str(value) >= wanted  # RFC 3339 UTC stamps sort as text
    return value == wanted


@pytest.fixture
def apis(monkeypatch: pytest.MonkeyPatch) -> GoogleApis:
    import google.auth
    from google.auth.transport import requests

    clock = FakeClock(START)
    fake = GoogleApis(clock, "etl")
    monkeypatch.setattr(google.auth, "default", lambda scopes: ("credentials", PROJECT))
    monkeypatch.setattr(requests, "AuthorizedSession", fake.session)
    return fake


def audited_app(store, apis: GoogleApis, entries: list[dict[str, Any]], runs: Counter) -> App:
    """The handler with its audit reading Scheduler through the real lister."""
    config = audit_settings({"DEDUP_SCHEDULES": json.dumps(entries)} | SCOPE, settings(**SCOPE))

    def counted(job: str):
        return lambda ctx: runs.update([(job, ctx.schedule_time)])

    jobs = {e["id"]: counted(e["id"]) for e in entries}
    live = scheduler_lister(PROJECT, REGION, {})
    app = make_app(store, jobs, apis.clock, audit=config, live=live, **SCOPE)
    record_epochs(store, config.project, config.region, config.schedules, START)
    return app


def deliver_run(app: App, clock: FakeClock, when: datetime) -> None:
    move_to(clock, when + timedelta(seconds=2))
    answer = deliver(app, scheduler_headers(job="etl", schedule_time=stamp(when)))
    assert answer.status == 200


@pytest.mark.parametrize(
    ("pause_version", "resume_version"),
    [("v1beta1", "v1beta1"), ("v1alpha1", "v1alpha1"), ("v1beta1", "v1")],
)
def test_a_pause_through_the_beta_or_alpha_api_is_deliberately_not_run_nor_caught_up(
    firestore_store, apis, capsys, pause_version: str, resume_version: str
):
    runs: Counter = Counter()
    entry = CATCHING_UP
    app = audited_app(firestore_store, apis, [entry], runs)
    # `gcloud beta (or alpha) scheduler jobs pause etl` at 01:20, resumed at 03:40.
    apis.call("etl", START + timedelta(hours=1, minutes=20), "PauseJob", pause_version)
    apis.call("etl", START + timedelta(hours=3, minutes=40), "ResumeJob", resume_version)
    for hour in (0, 1):
        deliver_run(app, apis.clock, START + timedelta(hours=hour))

    # One audit after the resume; Scheduler sent nothing in the pause, and 04:00 was lost.
    lines = audit_lines(app, apis.clock, capsys, START + timedelta(hours=4, minutes=30))

    (missed,) = [line for line in lines if line["outcome"] == "run_missed"]
    assert (missed["schedule_time"], missed["catch_up"]) == (
        stamp(START + timedelta(hours=4)),
        "completed",
    )
    # 02:00 and 03:00 fell in the pause: deliberately not run, not caught up.
    assert runs[("etl", START + timedelta(hours=2))] == 0
    assert runs[("etl", START + timedelta(hours=3))] == 0
    (summary,) = [line for line in lines if line["outcome"] == "audit_summary"]
    assert summary["paused_runs"] == 2


def test_a_state_change_the_pause_log_never_shows_is_one_finding_once_it_is_overdue(
    firestore_store, apis, capsys
):
    runs: Counter = Counter()
    entry = {"id": "etl", **HOURLY, "catchUp": True, "retryWindowSeconds": 7200}
    entry["catchUpMaxAgeSeconds"] = 6 * 3600
    app = audited_app(firestore_store, apis, [entry], runs)
    first = audit_lines(app, apis.clock, capsys, START + timedelta(hours=1))
    assert [line["outcome"] for line in first] == ["audit_summary"]  # nothing settled yet
    # A deploy pauses the job at 02:50; its log entry never reaches the audit (a filter
    # that no longer matches, or an entry that never arrives).
    apis.call("etl", START + timedelta(hours=2, minutes=50), "PauseJob", logged=False)
    deployed = audited_app(firestore_store, apis, [entry | {"paused": True}], runs)

    # At 04:00 the PauseJob may still be on its way: no finding. The times up to the last
    # sighting (enabled at 01:00:03) were enabled: missed and caught up; the later ones wait.
    lines = audit_lines(deployed, apis.clock, capsys, START + timedelta(hours=4))
    assert not [line for line in lines if line["outcome"] == "job_pause_log_disagrees"]
    assert sorted(runs) == [("etl", START), ("etl", START + timedelta(hours=1))]

    # Half an hour later the log still shows no call: it misses one. Neither it nor the
    # listing alone is believed: the settled time is reported, not excused nor caught up.
    lines = audit_lines(deployed, apis.clock, capsys, START + timedelta(hours=4, minutes=30))
    (disagrees,) = [line for line in lines if line["outcome"] == "job_pause_log_disagrees"]
    assert disagrees["job"] == "etl"
    assert "saw it paused at 2026-10-16T04:00:03Z" in disagrees["detail"]
    assert "shows it enabled then" in disagrees["detail"]
    assert "lists it paused now" in disagrees["detail"]
    (missed,) = [line for line in lines if line["outcome"] == "run_missed"]
    assert missed["schedule_time"] == stamp(START + timedelta(hours=2))
    assert "catch_up" not in missed
    assert len(runs) == 2


def test_a_log_whose_last_call_is_not_the_live_state_is_one_finding_and_nothing_caught_up(
    firestore_store, apis, capsys
):
    runs: Counter = Counter()
    entry = CATCHING_UP
    app = audited_app(firestore_store, apis, [entry], runs)
    apis.call("etl", START + timedelta(minutes=20), "PauseJob")
    apis.call("etl", START + timedelta(hours=1, minutes=10), "ResumeJob", logged=False)

    # 00:00 was before the pause: missed and caught up. From the pause on, the ResumeJob
    # may still be on its way: those times wait.
    lines = audit_lines(app, apis.clock, capsys, START + timedelta(hours=3))
    assert not [line for line in lines if line["outcome"] == "job_pause_log_disagrees"]
    missed = [line for line in lines if line["outcome"] == "run_missed"]
    assert [(line["schedule_time"], line["catch_up"]) for line in missed] == [
        (stamp(START), "completed")
    ]
    assert summary_of(lines)["pending"] == 3  # 03:00 has not settled either

    # Still not logged half an hour later: one finding, and nothing shows when the job
    # was enabled again: reported, not caught up.
    lines = audit_lines(app, apis.clock, capsys, START + timedelta(hours=3, minutes=30))
    (disagrees,) = [line for line in lines if line["outcome"] == "job_pause_log_disagrees"]
    assert disagrees["job"] == "etl"
    assert "saw it enabled at 2026-10-16T03:00:03Z" in disagrees["detail"]
    missed = {line["schedule_time"]: line for line in lines if line["outcome"] == "run_missed"}
    later = [missed[stamp(START + timedelta(hours=hour))] for hour in (1, 2)]
    assert all("catch_up" not in line for line in later)
    assert list(runs) == [("etl", START)]


def test_a_first_audit_excuses_nothing_for_a_pause_its_log_does_not_show_yet(
    firestore_store, apis, capsys
):
    runs: Counter = Counter()
    entry = CATCHING_UP
    # Scheduler sent none of 00:00-02:00; a deploy pauses the job at 02:55, logged 5 min later.
    apis.call("etl", START + timedelta(hours=2, minutes=55), "PauseJob", lag=timedelta(minutes=5))
    app = audited_app(firestore_store, apis, [entry | {"paused": True}], runs)

    # The first audit: listed paused, no PauseJob logged, no earlier sighting. A job paused
    # for days reads alike: nothing is excused (nor judged) yet.
    lines = audit_lines(app, apis.clock, capsys, START + timedelta(hours=2, minutes=58))
    assert [line["outcome"] for line in lines] == ["audit_summary"]
    assert summary_of(lines)["paused_runs"] == 0

    # Once logged, the pause began at 02:55: the three earlier times were missed.
    lines = audit_lines(app, apis.clock, capsys, START + timedelta(hours=3, minutes=10))
    missed = [line for line in lines if line["outcome"] == "run_missed"]
    assert [line["schedule_time"] for line in missed] == [
        stamp(START + timedelta(hours=hour)) for hour in range(3)
    ]
    assert all(line["catch_up"] == "completed" for line in missed)
    assert summary_of(lines)["paused_runs"] == 1  # 03:00, in the pause
    assert not [line for line in lines if line["outcome"] == "job_pause_log_disagrees"]


def test_a_pause_logged_minutes_late_is_waited_for_not_reported(firestore_store, apis, capsys):
    runs: Counter = Counter()
    entry = CATCHING_UP
    app = audited_app(firestore_store, apis, [entry], runs)
    for hour in (0, 1):
        deliver_run(app, apis.clock, START + timedelta(hours=hour))
    audit_lines(app, apis.clock, capsys, START + timedelta(hours=1, minutes=10))  # enabled
    # 02:00 was never sent; a deploy pauses the job at 02:30, its entry readable 4 min later.
    apis.call("etl", START + timedelta(hours=2, minutes=30), "PauseJob", lag=timedelta(minutes=4))
    app = audited_app(firestore_store, apis, [entry | {"paused": True}], runs)

    lines = audit_lines(app, apis.clock, capsys, START + timedelta(hours=2, minutes=32))
    assert [line["outcome"] for line in lines] == ["audit_summary"]  # 02:00 waits
    lines += audit_lines(app, apis.clock, capsys, START + timedelta(hours=2, minutes=42))

    assert not [line for line in lines if line["outcome"] == "job_pause_log_disagrees"]
    (missed,) = [line for line in lines if line["outcome"] == "run_missed"]
    assert (missed["schedule_time"], missed["catch_up"]) == (
        stamp(START + timedelta(hours=2)),
        "completed",
    )


def test_a_schedule_edited_and_edited_back_between_two_audits_is_not_caught_up(
    firestore_store, apis, capsys
):
    runs: Counter = Counter()
    entry = CATCHING_UP
    app = audited_app(firestore_store, apis, [entry], runs)
    deliver_run(app, apis.clock, START)
    audit_lines(app, apis.clock, capsys, START + timedelta(minutes=30))  # listed as deployed
    # A deploy sets another schedule at 00:40 (01:00 is not sent); its revert, at 01:50,
    # puts the deployed one back. Both are UpdateJobs; the next audit lists it as before.
    apis.call("etl", START + timedelta(minutes=40), "UpdateJob")
    apis.call("etl", START + timedelta(hours=1, minutes=50), "UpdateJob", "v1beta1")
    deliver_run(app, apis.clock, START + timedelta(hours=2))

    lines = audit_lines(app, apis.clock, capsys, START + timedelta(hours=2, minutes=30))

    # 01:00 may not have been due: reported as of unknown state, never caught up.
    (missed,) = [line for line in lines if line["outcome"] == "run_missed"]
    assert missed["schedule_time"] == stamp(START + timedelta(hours=1))
    assert "catch_up" not in missed
    assert "schedule edited at 2026-10-16T00:40:00Z and 2026-10-16T01:50:00Z" in missed["detail"]
    assert runs[("etl", START + timedelta(hours=1))] == 0
    # 02:00 follows the last edit: it waits for an audit that saw the job after it.
    assert summary_of(lines)["pending"] >= 1
    later = audit_lines(app, apis.clock, capsys, START + timedelta(hours=2, minutes=45))
    assert [line["outcome"] for line in later] == ["audit_summary"]
    assert summary_of(later)["pending"] == 0


def test_a_time_missed_after_one_edit_is_caught_up_once_an_audit_saw_the_job_since(
    firestore_store, apis, capsys
):
    runs: Counter = Counter()
    entry = CATCHING_UP
    app = audited_app(firestore_store, apis, [entry], runs)
    deliver_run(app, apis.clock, START)
    # A deploy changes the job's deadline at 00:50 (one UpdateJob); 01:00 is lost.
    apis.call("etl", START + timedelta(minutes=50), "UpdateJob")

    lines = audit_lines(app, apis.clock, capsys, START + timedelta(hours=1, minutes=30))
    # No audit saw the job since the edit: an undo not yet logged could hide behind it.
    assert [line["outcome"] for line in lines] == ["audit_summary"]
    assert runs[("etl", START + timedelta(hours=1))] == 0

    lines = audit_lines(app, apis.clock, capsys, START + timedelta(hours=1, minutes=45))
    (missed,) = [line for line in lines if line["outcome"] == "run_missed"]
    assert (missed["schedule_time"], missed["catch_up"]) == (
        stamp(START + timedelta(hours=1)),
        "completed",
    )
    assert runs[("etl", START + timedelta(hours=1))] == 1
