"""The audit and the jobs' live state, on the emulator: paused, drifted, unauditable, stale.

Each audit here is a delivery of the audit's reserved job through the HTTP
handler; Cloud Scheduler's listing is a fake lister (the real one talks REST).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from runledger.audit.scheduler_state import LiveJob, session_listing
from runledger.delivery.identify import run_key
from runledger.ledger.epochs import record_epochs
from runledger.schedules import AUDIT_JOB_ID, AuditSettings, JobSchedule, audit_settings
from runledger.sdk.context import RunContext
from runledger.service.app import App
from tests.handler.support import (
    LEASE,
    FakeClock,
    FakeScheduler,
    deliver,
    make_app,
    run_record,
    scheduler_headers,
    settings,
    unreadable,
)

SCOPE = {"DEDUP_ALLOWED_PROJECTS": "acme-prod", "DEDUP_ALLOWED_REGIONS": "europe-west1"}
# The stack was deployed, and its first audit saw every job, at START.
START = datetime(2026, 10, 16, 0, 0, tzinfo=UTC)
HOURLY = {"schedule": "0 * * * *", "timeZone": "UTC", "retryWindowSeconds": 200}


def stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


class Jobs:
    """Jobs that count their executions per (job, schedule time)."""

    def __init__(self) -> None:
        self.runs: Counter = Counter()
        self._lock = threading.Lock()

    def job(self, name: str):
        def run(ctx: RunContext) -> None:
            with self._lock:
                self.runs[name, ctx.schedule_time] += 1

        return run


def audited_app(
    store, jobs: Jobs, clock: FakeClock, entries: list[dict[str, Any]], live=None
) -> tuple[App, AuditSettings]:
    config = audit_settings({"DEDUP_SCHEDULES": json.dumps(entries)} | SCOPE, settings(**SCOPE))
    run_jobs = {e["id"]: jobs.job(e["id"]) for e in entries}
    app = make_app(store, run_jobs, clock, audit=config, live=live, **SCOPE)
    record_epochs(store, config.project, config.region, config.schedules, START)
    return app, config


def move_to(clock: FakeClock, when: datetime) -> None:
    clock.advance(seconds=(when - clock()).total_seconds())


def audit_lines(app: App, clock: FakeClock, capsys, when: datetime) -> list[dict[str, Any]]:
    """Deliver the audit of `when` just after it; the lines it logged, the request's left out."""
    move_to(clock, when + timedelta(seconds=3))
    capsys.readouterr()
    answer = deliver(app, scheduler_headers(job=AUDIT_JOB_ID, schedule_time=stamp(when)))
    assert (answer.status, answer.outcome) == (200, "completed")
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    return [line for line in lines if line.get("job") != AUDIT_JOB_ID or "findings" in line]


def summary_of(lines: list[dict[str, Any]]) -> dict[str, Any]:
    (summary,) = [line for line in lines if line["outcome"] == "audit_summary"]
    return summary


def twelve_hours(
    app: App, clock: FakeClock, capsys, sent: Callable[[datetime], list[str]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """12 hours of hourly runs (`sent`: the jobs Scheduler delivers at a time) and an audit
    every 30 minutes: every finding line, and the last audit's summary."""
    findings: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    for step in range(25):
        when = START + timedelta(minutes=30 * step)
        move_to(clock, when + timedelta(seconds=1))
        for job in sent(when) if when.minute == 0 else []:
            answer = deliver(app, scheduler_headers(job=job, schedule_time=stamp(when)))
            assert answer.status == 200
        if step:
            lines = audit_lines(app, clock, capsys, when)
            findings += [line for line in lines if line["outcome"] != "audit_summary"]
            summary = summary_of(lines)
    return findings, summary


def test_a_job_the_stack_paused_is_neither_reported_nor_run_over_12_hours(firestore_store, capsys):
    jobs = Jobs()
    clock = FakeClock(START)
    entries = [
        {"id": "etl", **HOURLY, "catchUp": True, "paused": True},
        {"id": "report", **HOURLY, "catchUp": True},
    ]
    app, _ = audited_app(firestore_store, jobs, clock, entries)  # Scheduler not read

    # report runs as scheduled; Scheduler sends the paused etl nothing
    findings, summary = twelve_hours(app, clock, capsys, lambda when: ["report"])

    assert findings == []
    assert all(job == "report" for job, _ in jobs.runs)  # etl never ran, not even caught up
    assert summary["findings"] == 0 and summary["caught_up"] == 0
    assert summary["paused_jobs"] == [{"job": "etl", "since": None}]
    assert summary["paused_runs"] > 0
    assert "paused (not run, not findings): etl" in summary["message"]
    assert "Cloud Scheduler not read (no lister)" in summary["message"]


def test_a_console_pause_of_a_job_the_stack_runs_is_drifted_not_excused_nor_caught_up(
    firestore_store, capsys
):
    jobs = Jobs()
    clock = FakeClock(START)
    paused_at = START + timedelta(hours=2, minutes=10)
    resumed_at = START + timedelta(hours=8, minutes=55)
    scheduler = FakeScheduler(clock, etl="0 * * * *", sync="0 * * * *")
    scheduler.pause("etl", paused_at).pause("sync", paused_at)
    scheduler.resume("etl", resumed_at).resume("sync", resumed_at)
    entries = [{"id": "etl", **HOURLY, "catchUp": True}, {"id": "sync", **HOURLY}]
    app, _ = audited_app(firestore_store, jobs, clock, entries, live=scheduler)

    # Both ran until the pause and again after the resume; Scheduler sent nothing between.
    findings, summary = twelve_hours(
        app,
        clock,
        capsys,
        lambda when: ["etl", "sync"] if when < paused_at or when >= resumed_at else [],
    )

    # Every audit that saw the pause reported both jobs drifted: a pause the stack
    # does not know of loses every run, so it is a finding, not an excuse.
    audits = [START + timedelta(minutes=30 * step) for step in range(1, 25)]
    in_pause = sum(1 for when in audits if paused_at < when < resumed_at)
    assert Counter((line["job"], line["outcome"]) for line in findings) == {
        ("etl", "job_drifted"): in_pause,
        ("sync", "job_drifted"): in_pause,
    }
    assert "paused in Cloud Scheduler, enabled in the stack" in findings[0]["detail"]
    # After the resume, the log shows the pause: its times are deliberately not run,
    # never missed nor caught up.
    ran = (0, 1, 2, 9, 10, 11, 12)
    assert sorted(jobs.runs) == sorted(
        (job, START + timedelta(hours=hour)) for job in ("etl", "sync") for hour in ran
    )
    assert summary["findings"] == 0 and summary["caught_up"] == 0
    assert summary["paused_jobs"] == []
    assert summary["message"].endswith("job states from Cloud Scheduler")


def test_a_job_the_stack_paused_is_excused_only_from_when_the_log_shows_the_pause(
    firestore_store, capsys
):
    jobs = Jobs()
    clock = FakeClock(START)
    paused_at = START + timedelta(hours=2, minutes=10)  # the `pulumi up` that paused it
    scheduler = FakeScheduler(clock, etl="0 * * * *").pause("etl", paused_at)
    entries = [{"id": "etl", **HOURLY, "catchUp": True, "paused": True}]
    app, _ = audited_app(firestore_store, jobs, clock, entries, live=scheduler)

    # Scheduler's deliveries before the pause were all lost; after it, it sends nothing.
    lines = audit_lines(app, clock, capsys, START + timedelta(hours=5))

    missed = [line for line in lines if line["outcome"] == "run_missed"]
    times = [line["schedule_time"] for line in missed]
    assert times == [stamp(START + timedelta(hours=hour)) for hour in (0, 1, 2)]
    summary = summary_of(lines)
    assert summary["paused_jobs"] == [{"job": "etl", "since": stamp(paused_at)}]
    assert summary["paused_runs"] == 3  # 03:00, 04:00 and 05:00
    assert jobs.runs[("etl", START + timedelta(hours=3))] == 0


def test_catch_up_runs_no_time_of_a_pause_that_began_and_ended_between_two_audits(
    firestore_store, capsys
):
    jobs = Jobs()
    clock = FakeClock(START)
    scheduler = FakeScheduler(clock, etl="0 * * * *")
    scheduler.pause("etl", START + timedelta(hours=1, minutes=20))
    scheduler.resume("etl", START + timedelta(hours=3, minutes=40))
    entries = [{"id": "etl", **HOURLY, "catchUp": True, "catchUpMaxAgeSeconds": 6 * 3600}]
    app, _ = audited_app(firestore_store, jobs, clock, entries, live=scheduler)
    for hour in (0, 1):
        when = START + timedelta(hours=hour)
        move_to(clock, when + timedelta(seconds=2))
        deliver(app, scheduler_headers(job="etl", schedule_time=stamp(when)))

    # One audit after the resume; 04:00 was sent but its delivery was lost.
    lines = audit_lines(app, clock, capsys, START + timedelta(hours=4, minutes=30))

    (missed,) = [line for line in lines if line["outcome"] == "run_missed"]
    assert (missed["schedule_time"], missed["catch_up"]) == (
        stamp(START + timedelta(hours=4)),
        "completed",
    )
    # 02:00 and 03:00 fell in the pause: deliberately not run.
    assert jobs.runs[("etl", START + timedelta(hours=2))] == 0
    assert jobs.runs[("etl", START + timedelta(hours=3))] == 0
    assert summary_of(lines)["paused_runs"] == 2


def test_without_the_pause_log_a_missed_time_is_reported_as_unknown_and_not_caught_up(
    firestore_store, capsys
):
    jobs = Jobs()
    clock = FakeClock(START)
    scheduler = FakeScheduler(clock, etl="0 * * * *")
    scheduler.log_unread = "permission logging.logEntries.list denied"
    entries = [{"id": "etl", **HOURLY, "catchUp": True}]
    app, _ = audited_app(firestore_store, jobs, clock, entries, live=scheduler)

    lines = audit_lines(app, clock, capsys, START + timedelta(hours=2))

    missed = [line for line in lines if line["outcome"] == "run_missed"]
    assert len(missed) == 2
    assert all("catch_up" not in line for line in missed)
    assert all("job state unknown" in line["detail"] for line in missed)
    assert "logging.logEntries.list denied" in missed[0]["detail"]
    assert not jobs.runs
    summary = summary_of(lines)
    assert summary["pause_history_unread"] == "permission logging.logEntries.list denied"
    assert "missed runs reported, not caught up" in summary["message"]


def test_a_pause_the_log_does_not_show_yet_is_weighed_against_what_the_last_audit_saw(
    firestore_store, capsys
):
    jobs = Jobs()
    clock = FakeClock(START)
    paused_at = START + timedelta(hours=2, minutes=50)  # the deploy's PauseJob, not yet logged
    scheduler = FakeScheduler(clock, etl="0 * * * *").pause("etl", paused_at, logged=False)
    entry = {"id": "etl", **HOURLY, "retryWindowSeconds": 7200}
    app, _ = audited_app(firestore_store, jobs, clock, [entry], live=scheduler)
    first = audit_lines(app, clock, capsys, START + timedelta(hours=1))
    assert summary_of(first)["pending"] == 2  # 00:00 and 01:00 not settled yet: not judged
    # The deploy pauses the job and writes `paused: true` into the handler's settings.
    deployed, _ = audited_app(firestore_store, jobs, clock, [entry | {"paused": True}], scheduler)

    lines = audit_lines(deployed, clock, capsys, START + timedelta(hours=4))

    # The log shows no pause in the window, which alone would make it paused throughout;
    # the first audit saw it enabled at 01:00:03, so it was enabled up to then: 00:00 and
    # 01:00 missed. The PauseJob may still be on its way: 02:00 waits for the log.
    missed = [line for line in lines if line["outcome"] == "run_missed"]
    assert [line["schedule_time"] for line in missed] == [
        stamp(START),
        stamp(START + timedelta(hours=1)),
    ]
    assert all("detail" not in line for line in missed)
    assert summary_of(lines)["paused_runs"] == 0


class RestScheduler:
    """Scheduler's jobs.list and Logging's entries.list over REST, as the audit reads them
    (`scheduler_state.session_listing`): one enabled hourly job, and the log's `calls`."""

    def __init__(self, calls: list[tuple[str, datetime]]) -> None:
        self.calls = calls

    def get(self, url: str, params: dict[str, str], timeout: float) -> Any:
        name = "projects/acme-prod/locations/europe-west1/jobs/etl"
        return _Rest({"jobs": [{"name": name, "state": "ENABLED", "schedule": "0 * * * *"}]})

    def post(self, url: str, json: dict[str, Any], timeout: float) -> Any:
        entries = [
            {
                "timestamp": stamp(at),
                "protoPayload": {
                    "serviceName": "cloudscheduler.googleapis.com",
                    "methodName": f"google.cloud.scheduler.v1.CloudScheduler.{method}",
                    "resourceName": "projects/acme-prod/locations/europe-west1/jobs/etl",
                },
            }
            for method, at in self.calls
        ]
        return _Rest({"entries": entries})


class _Rest:
    status_code = 200

    def __init__(self, body: dict[str, Any]) -> None:
        self._body = body

    def json(self) -> dict[str, Any]:
        return self._body


def test_a_job_a_deploy_deleted_and_one_added_back_is_not_judged_for_its_absence(
    firestore_store, capsys
):
    """Removed from the stack at 01:30 and added back with its schedule at 04:30: its
    epoch and watermark still hold, but Scheduler sent nothing between (seed 16 of the
    simulator's `deploy_in_flight`: those times were reported missed and caught up)."""
    jobs = Jobs()
    clock = FakeClock(START)
    rest = RestScheduler([])
    entries = [{"id": "etl", **HOURLY, "catchUp": True, "catchUpMaxAgeSeconds": 6 * 3600}]
    live = lambda since: session_listing(rest, "acme-prod", "europe-west1", since)  # noqa: E731
    app, _ = audited_app(firestore_store, jobs, clock, entries, live=live)
    for hour in (0, 1, 5):
        if hour == 5:
            rest.calls = [
                ("DeleteJob", START + timedelta(hours=1, minutes=30)),
                ("CreateJob", START + timedelta(hours=4, minutes=30)),
            ]
        when = START + timedelta(hours=hour)
        move_to(clock, when + timedelta(seconds=2))
        assert deliver(app, scheduler_headers(job="etl", schedule_time=stamp(when))).status == 200
        if hour == 1:
            audit_lines(app, clock, capsys, START + timedelta(hours=1, minutes=15))

    lines = audit_lines(app, clock, capsys, START + timedelta(hours=5, minutes=30))

    assert [line for line in lines if line["outcome"] != "audit_summary"] == []
    assert all(jobs.runs[("etl", START + timedelta(hours=h))] == 0 for h in (2, 3, 4))
    assert summary_of(lines)["paused_runs"] == 3


def test_a_new_schedule_is_judged_from_when_scheduler_is_seen_to_have_it(firestore_store, capsys):
    """A deploy moves etl from :00 to :30. Its new revision audits at 01:05 with Scheduler
    unreadable, and Scheduler takes the new schedule at 01:40: 01:30 was never sent, so no
    audit may judge it (seed 36 of the simulator's `deploy_in_flight`: reported, caught up)."""
    jobs = Jobs()
    clock = FakeClock(START)
    audited_app(firestore_store, jobs, clock, [{"id": "etl", **HOURLY}])  # epoch for :00
    entries = [{"id": "etl", **HOURLY, "schedule": "30 * * * *", "catchUp": True}]
    config = audit_settings({"DEDUP_SCHEDULES": json.dumps(entries)} | SCOPE, settings(**SCOPE))

    def revision(live) -> App:
        return make_app(firestore_store, {"etl": jobs.job("etl")}, clock, audit=config, live=live)

    unread = audit_lines(
        revision(unreadable("jobs.list answered HTTP 503")),
        clock,
        capsys,
        START + timedelta(hours=1, minutes=5),
    )
    assert summary_of(unread)["checked"] == 0
    # Scheduler has the new schedule from 01:40 on.
    lines = audit_lines(
        revision(FakeScheduler(clock, etl="30 * * * *")), clock, capsys, START + timedelta(hours=3)
    )
    later = audit_lines(
        revision(FakeScheduler(clock, etl="30 * * * *")), clock, capsys, START + timedelta(hours=4)
    )

    # Judged from the 03:00 audit that saw it: 03:30, never delivered, is reported and
    # caught up; 01:30 is neither (02:30 is before that epoch, as any new schedule's).
    reported = [line for line in lines + later if line["outcome"] == "run_missed"]
    assert [line["schedule_time"] for line in reported] == [
        stamp(START + timedelta(hours=3, minutes=30))
    ]
    assert jobs.runs[("etl", START + timedelta(hours=1, minutes=30))] == 0


def paused_long_ago_log_unread(store) -> tuple[Jobs, FakeClock, App]:
    """A job the stack and Scheduler have paused since yesterday; Scheduler's log unread."""
    jobs = Jobs()
    clock = FakeClock(START)
    scheduler = FakeScheduler(clock, etl="0 * * * *").pause("etl", START - timedelta(days=1))
    scheduler.log_unread = "entries.list answered HTTP 503"
    entries = [{"id": "etl", **HOURLY, "catchUp": True, "paused": True}]
    app, _ = audited_app(store, jobs, clock, entries, live=scheduler)
    return jobs, clock, app


def test_without_the_log_a_job_paused_at_two_audits_is_taken_as_paused_between_them(
    firestore_store, capsys
):
    jobs, clock, app = paused_long_ago_log_unread(firestore_store)

    first = audit_lines(app, clock, capsys, START + timedelta(hours=1))
    second = audit_lines(app, clock, capsys, START + timedelta(hours=3))

    # Nothing showed 00:00 and 01:00 (before the first audit looked) paused: reported,
    # not caught up. Both audits saw it paused, so 02:00 and 03:00, after the first
    # audit, are deliberately not run.
    assert [line["schedule_time"] for line in first if line["outcome"] == "run_missed"] == [
        stamp(START)
    ]
    missed = [line for line in second if line["outcome"] == "run_missed"]
    assert [line["schedule_time"] for line in missed] == [stamp(START + timedelta(hours=1))]
    assert "no pause history (entries.list answered HTTP 503)" in missed[0]["detail"]
    assert summary_of(second)["paused_runs"] == 2
    # When the pause began is not known: no audit saw it begin, and no log says.
    assert summary_of(second)["paused_jobs"] == [{"job": "etl", "since": None}]
    assert not jobs.runs


def test_deleting_the_audits_documents_loses_only_evidence_never_a_run(
    firestore_store, firestore_db, capsys
):
    jobs, clock, app = paused_long_ago_log_unread(firestore_store)
    audit_lines(app, clock, capsys, START + timedelta(hours=1))
    # An operator deletes the audit's documents (epochs, watermarks, sightings).
    firestore_db.recursive_delete(firestore_db.collection("runledger_audit"))

    lines = audit_lines(app, clock, capsys, START + timedelta(hours=3))

    # The epoch comes back from its lasting copy and the look-back is judged again, but
    # the sighting that showed 02:00 paused is gone, and the log is unread: 00:00 to
    # 02:00 are of unknown state, reported, not caught up (03:00 has not settled).
    # Nothing ran twice or at all, and no time is excused on evidence that is gone.
    missed = [line for line in lines if line["outcome"] == "run_missed"]
    assert [line["schedule_time"] for line in missed] == [
        stamp(START + timedelta(hours=hour)) for hour in range(3)
    ]
    assert all("job state unknown" in line["detail"] for line in missed)
    assert summary_of(lines)["paused_runs"] == 0
    assert not jobs.runs
    later = audit_lines(app, clock, capsys, START + timedelta(hours=5))
    assert summary_of(later)["paused_runs"] == 2  # 04:00, 05:00: both audits saw it paused
    assert not jobs.runs


def test_a_job_resumed_in_the_console_while_the_stack_has_it_paused_is_drifted(
    firestore_store, capsys
):
    jobs = Jobs()
    clock = FakeClock(START)
    entries = [{"id": "etl", **HOURLY, "paused": True}]  # the stack says paused, Scheduler not
    scheduler = FakeScheduler(clock, etl="0 * * * *")
    app, _ = audited_app(firestore_store, jobs, clock, entries, live=scheduler)

    lines = audit_lines(app, clock, capsys, START + timedelta(hours=2))

    drifted, _ = lines
    assert drifted["outcome"] == "job_drifted"
    assert "enabled in Cloud Scheduler, paused in the stack" in drifted["detail"]
    assert summary_of(lines)["paused_jobs"] == []


def test_a_schedule_edited_in_the_console_is_one_drifted_finding_not_a_stream_of_misses(
    firestore_store, capsys
):
    live = {
        "etl": LiveJob("etl", False, "0 */2 * * *", "UTC"),  # edited
        "tz": LiveJob("tz", False, "0 * * * *", "Europe/Berlin"),  # edited time zone
        "report": LiveJob("report", False, "0 * * * *", "UTC", history_from=START),
    }  # "gone" was deleted in the console
    jobs = Jobs()
    clock = FakeClock(START)
    entries = [{"id": job, **HOURLY} for job in ("etl", "tz", "gone", "report")]
    app, _ = audited_app(firestore_store, jobs, clock, entries, live=lambda since: live)
    # A first audit sees no pause or resume logged: that may be one the log does not show
    # yet (`audit.pauses.PAUSE_LOG_LAG`), so it judges the next audit, from its sighting.
    first = audit_lines(app, clock, capsys, START + timedelta(hours=5, minutes=40))
    assert not [line for line in first if line["outcome"] == "run_missed"]

    lines = audit_lines(app, clock, capsys, START + timedelta(hours=6))

    by_job = Counter((line["job"], line["outcome"]) for line in lines)
    assert by_job[("etl", "job_drifted")] == 1
    assert by_job[("tz", "job_drifted")] == 1
    assert by_job[("gone", "job_drifted")] == 1
    assert not any(job in ("etl", "tz", "gone") for job, kind in by_job if kind == "run_missed")
    assert by_job[("report", "run_missed")] == 5  # the one job still as deployed is judged
    drifted = next(line for line in lines if line["job"] == "etl")
    assert "'0 */2 * * *'" in drifted["detail"] and "'0 * * * *'" in drifted["detail"]
    assert summary_of(lines)["drifted"] == 3


def test_scheduler_unreadable_leaves_job_states_unknown_reports_and_catches_nothing_up(
    firestore_store, capsys
):
    jobs = Jobs()
    clock = FakeClock(START)
    denied = unreadable("permission cloudscheduler.jobs.list denied")
    entries = [{"id": "etl", **HOURLY, "catchUp": True}, {"id": "held", **HOURLY, "paused": True}]
    app, _ = audited_app(firestore_store, jobs, clock, entries, live=denied)

    lines = audit_lines(app, clock, capsys, START + timedelta(hours=2))

    # Nothing shows either job enabled or paused then: every missing time is reported
    # (the stack's `paused` alone does not say when Scheduler paused it), none is run.
    found = [(line["job"], line["outcome"]) for line in lines if line["outcome"] != "audit_summary"]
    assert Counter(found) == {("etl", "run_missed"): 2, ("held", "run_missed"): 2}
    assert not jobs.runs
    summary = summary_of(lines)
    assert summary["scheduler_read"] is False and summary["caught_up"] == 0
    assert summary["message"].endswith(
        "Cloud Scheduler not read (permission cloudscheduler.jobs.list denied): "
        "job states unknown, missed runs reported, not caught up"
    )


def test_a_job_whose_times_cannot_be_listed_is_unauditable_and_the_others_are_audited(
    firestore_store, capsys
):
    jobs = Jobs()
    clock = FakeClock(START)
    app, config = audited_app(firestore_store, jobs, clock, [{"id": "etl", **HOURLY}])
    # A schedule start-up refuses (June 31st) stands for any one job croniter fails on.
    broken = JobSchedule(
        "broken", "0 9 31 6 *", "UTC", timedelta(seconds=200), timedelta(seconds=180), False,
        timedelta(hours=1),
    )  # fmt: skip
    both = AuditSettings((broken, *config.schedules), *_rest(config))
    run_jobs = {"etl": jobs.job("etl"), "broken": jobs.job("broken")}
    app = make_app(firestore_store, run_jobs, clock, audit=both, **SCOPE)

    lines = audit_lines(app, clock, capsys, START + timedelta(hours=3))

    kinds = [(line["job"], line["outcome"]) for line in lines]
    assert kinds[0] == ("broken", "job_unauditable")
    assert kinds.count(("etl", "run_missed")) == 3  # 00:00, 01:00, 02:00
    summary = summary_of(lines)
    assert (summary["unauditable"], summary["missed"]) == (1, 3)


def _rest(config: AuditSettings) -> tuple[timedelta, str, str]:
    return config.lookback, config.project, config.region


def test_catch_up_redoes_a_stale_run_once_through_the_takeover_rule(firestore_store, capsys):
    jobs = Jobs()
    clock = FakeClock(START)
    entries = [{"id": "etl", **HOURLY, "catchUp": True, "catchUpMaxAgeSeconds": 3 * 3600}]
    app, config = audited_app(firestore_store, jobs, clock, entries)
    for hour in (1, 2):
        move_to(clock, START + timedelta(hours=hour, seconds=2))
        deliver(
            app, scheduler_headers(job="etl", schedule_time=stamp(START + timedelta(hours=hour)))
        )
    dead = START  # 00:00: its holder died right after claiming
    key = run_key("etl", dead, config.project, config.region, manual=False)
    firestore_store.create(
        key, run_record("dead", job="etl", schedule_time=dead, lease_expires=dead + LEASE)
    )

    lines = audit_lines(app, clock, capsys, START + timedelta(hours=2, minutes=30))

    (stale,) = [line for line in lines if line["outcome"] == "run_stale"]
    assert (stale["schedule_time"], stale["catch_up"]) == (stamp(dead), "completed")
    assert jobs.runs[("etl", dead)] == 1
    assert stale["trigger"] == "catch_up"
    assert firestore_store.get(key).record.trigger == "catch_up"
    again = audit_lines(app, clock, capsys, START + timedelta(hours=3))
    assert [line["outcome"] for line in again] == ["audit_summary"]
    assert jobs.runs[("etl", dead)] == 1
