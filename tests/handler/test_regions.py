"""A schedule in two regions, in-process on the emulator: one region down, drift per region.

Both apps are built from the environment the program sets for each region
(`ScheduleConfig.handler_env(region)`) on one Firestore emulator and one test
clock, so an hour passes without waiting for it.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest

from dedup_schedule.config.parser import parse_config
from runledger.audit.regions import RegionDrift, RegionListing, by_region, regional_lister
from runledger.audit.scheduler_state import LiveJob
from runledger.config import Settings
from runledger.delivery.identify import run_key
from runledger.exceptions import ConfigError, SchedulerUnreadable
from runledger.ledger.epochs import record_epochs
from runledger.ops.cli import main
from runledger.schedules import parse_schedules
from runledger.sdk.context import RunContext
from runledger.service.app import App
from tests.handler.support import T0, FakeClock, deliver, scheduler_headers
from tests.handler.test_audit import move_to, stamp

PROJECT, FIRST, SECOND = "acme-prod", "europe-west1", "europe-west4"
JOB, AUDIT = "tick", "dedup-audit"
STACK = {
    "gcp:project": PROJECT,
    "gcp:region": FIRST,
    "scheduler-dedup:regions": [FIRST, SECOND],
    "scheduler-dedup:database": {"location": "eur3"},
    "scheduler-dedup:jobs": [{"id": JOB, "schedule": "*/5 * * * *", "attemptDeadline": "60s"}],
    "scheduler-dedup:audit": {"schedule": "*/30 * * * *"},
}


def region_app(
    region: str, store, clock: FakeClock, ran: Counter, listings: Mapping[str, Any] | None = None
) -> App:
    env = parse_config(STACK).handler_env(region)

    def tick(ctx: RunContext) -> None:
        ran[ctx.schedule_time] += 1

    live = None
    if listings is not None:
        live = regional_lister({name: listings[name] for name in (FIRST, SECOND)})
    return App.from_env(env, clock, jobs={JOB: tick}, store_factory=lambda: store, live=live)


def audit_lines(app: App, clock: FakeClock, region: str, capsys) -> list[dict[str, Any]]:
    capsys.readouterr()
    when = clock().replace(minute=clock().minute // 30 * 30, second=0)
    answer = deliver(app, scheduler_headers(job=AUDIT, schedule_time=stamp(when), region=region))
    assert answer.status == 200
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_with_one_region_down_for_an_hour_every_time_runs_once_and_nothing_is_missed(
    firestore_store, capsys
):
    clock = FakeClock(T0 - timedelta(hours=2))
    ran: Counter[datetime] = Counter()
    apps = {region: region_app(region, firestore_store, clock, ran) for region in (FIRST, SECOND)}
    schedules = parse_schedules(_schedules_env(FIRST))
    record_epochs(firestore_store, PROJECT, FIRST, schedules, T0 - timedelta(hours=2))
    times = [T0 - timedelta(hours=2) + timedelta(minutes=5 * i) for i in range(24)]
    down = (T0 - timedelta(hours=1, minutes=30), T0 - timedelta(minutes=30))
    answers = Counter()
    for when in times:
        move_to(clock, when + timedelta(seconds=2))
        # The first region is down for an hour: its deliveries never reach a handler.
        senders = [SECOND] if down[0] <= when < down[1] else [FIRST, SECOND]
        for region in senders:
            headers = scheduler_headers(job=JOB, schedule_time=stamp(when), region=region)
            answers[deliver(apps[region], headers).status] += 1

    assert answers == {200: len(times) + len([t for t in times if not down[0] <= t < down[1]])}
    assert ran == dict.fromkeys(times, 1)
    move_to(clock, T0 + timedelta(minutes=1))
    lines = audit_lines(apps[SECOND], clock, SECOND, capsys)
    (summary,) = [line for line in lines if line["outcome"] == "audit_summary"]
    assert (summary["findings"], summary["checked"]) == (0, len(times))
    # The first region, back, delivers the same audit time: a duplicate, not a second audit.
    again = audit_lines(apps[FIRST], clock, FIRST, capsys)
    assert [line["outcome"] for line in again] == ["duplicate_completed"]
    assert again[0]["cross_region_duplicate"] == SECOND


def _schedules_env(region: str) -> str:
    return parse_config(STACK).handler_env(region)["DEDUP_SCHEDULES"]


def test_both_regions_key_a_time_by_the_first_region_and_the_record_keeps_who_ran_it(
    firestore_store, clock
):
    ran: Counter[datetime] = Counter()
    app = region_app(SECOND, firestore_store, clock, ran)
    when = clock().replace(second=0)
    deliver(app, scheduler_headers(job=JOB, schedule_time=stamp(when), region=SECOND))

    found = firestore_store.get(run_key(JOB, when, PROJECT, FIRST, manual=False))
    assert found is not None
    assert (found.record.region, found.record.delivered_region) == (FIRST, SECOND)


def test_a_handler_refuses_a_key_region_outside_its_regions():
    env = {"DEDUP_ALLOWED_REGIONS": SECOND, "DEDUP_KEY_REGION": "us-east1", "DEDUP_REGIONS": SECOND}
    with pytest.raises(ConfigError, match=r"^DEDUP_KEY_REGION: 'us-east1' is not one of"):
        Settings.from_env(env)
    with pytest.raises(ConfigError, match=r"^DEDUP_REGIONS: set only with DEDUP_KEY_REGION"):
        Settings.from_env({"DEDUP_REGIONS": SECOND})


def live(paused: bool = False, schedule: str = "*/5 * * * *") -> dict[str, LiveJob]:
    return {JOB: LiveJob(JOB, paused, schedule, "UTC")}


def test_a_job_paused_in_one_region_only_is_one_finding_naming_it_and_still_judged():
    (schedule,) = parse_schedules(_schedules_env(FIRST))
    listing = RegionListing({FIRST: live(), SECOND: live(paused=True)}, {})

    chosen, drifts = by_region([schedule], listing)

    assert chosen == {JOB: live()[JOB]}
    assert list(drifts) == [JOB] and drifts[JOB].judged
    assert drifts[JOB].reason.startswith(f"in {SECOND}: paused in Cloud Scheduler")
    assert f"{FIRST} still sends its runs" in drifts[JOB].reason


def test_a_job_off_in_every_region_is_not_judged_and_both_regions_are_named():
    (schedule,) = parse_schedules(_schedules_env(FIRST))
    listing = RegionListing({FIRST: {}, SECOND: live(schedule="0 * * * *")}, {})

    _, drifts = by_region([schedule], listing)

    assert drifts == {
        JOB: RegionDrift(
            f"in {FIRST}: not in Cloud Scheduler: no run of it will be sent; in {SECOND}: "
            "Cloud Scheduler has '0 * * * *' in UTC, DEDUP_SCHEDULES '*/5 * * * *' in UTC: "
            "its runs are not judged until they agree (edit the stack's config, or undo the "
            "edit, and deploy)",
            judged=False,
        )
    }


def test_a_region_whose_scheduler_cannot_be_listed_is_no_finding(firestore_store, capsys):
    def down(since: datetime) -> dict[str, LiveJob]:
        raise SchedulerUnreadable("503 from cloudscheduler.googleapis.com")

    clock = FakeClock(T0 - timedelta(minutes=30))
    ran: Counter[datetime] = Counter()
    listings = {FIRST: down, SECOND: lambda since: live()}
    app = region_app(SECOND, firestore_store, clock, ran, listings)
    schedules = parse_schedules(_schedules_env(SECOND))
    record_epochs(firestore_store, PROJECT, FIRST, schedules, T0 - timedelta(minutes=30))
    for minutes in range(0, 30, 5):
        when = T0 - timedelta(minutes=30 - minutes)
        move_to(clock, when + timedelta(seconds=2))
        deliver(app, scheduler_headers(job=JOB, schedule_time=stamp(when), region=SECOND))
    move_to(clock, T0 + timedelta(minutes=1))

    lines = audit_lines(app, clock, SECOND, capsys)

    (summary,) = [line for line in lines if line["outcome"] == "audit_summary"]
    assert (summary["findings"], summary["scheduler_read"]) == (0, True)
    assert summary["checked"] == 6


def test_describe_shows_each_regions_live_state_and_judges_a_job_one_region_still_sends(
    firestore_emulator, firestore_db
):
    env = (
        parse_config(STACK).handler_env(SECOND)
        | firestore_emulator.env()
        | {"DEDUP_COLLECTION": "regions_describe"}
    )
    states = {FIRST: live(paused=True), SECOND: live()}

    def factory(project: str, region: str, environment: Mapping[str, str]):
        assert project == PROJECT
        return lambda since: states[region]

    out = io.StringIO()
    now = T0 + timedelta(minutes=30)
    args = ["describe", "--job", JOB, "--json"]
    code = main(args, env=env, clock=lambda: now, lister_factory=factory, stdout=out)

    view = json.loads(out.getvalue())
    assert code == 0
    assert view["state"]["regions"] == {
        FIRST: {
            "read": True,
            "detail": "paused",
            "drift": view["state"]["regions"][FIRST]["drift"],
        },
        SECOND: {"read": True, "detail": "enabled", "drift": None},
    }
    assert view["state"]["regions"][FIRST]["drift"].startswith("paused in Cloud Scheduler")
    assert view["state"]["drift"].startswith(f"in {FIRST}: paused")
    # The second region still sends it: its unrun times are missed, not drifted.
    assert {item["status"] for item in view["recent"]} == {"missed", "pending"}
    text = io.StringIO()
    main(args[:-1], env=env, clock=lambda: now, lister_factory=factory, stdout=text)
    assert f"  {FIRST:<21} paused; drifted: paused in Cloud Scheduler" in text.getvalue()


def test_a_run_recorded_before_a_region_was_added_is_a_duplicate_in_both_regions(
    firestore_store, clock
):
    # The same stack before `regions` was added: gcp:region alone, same ledger.
    before = {key: value for key, value in STACK.items() if key != "scheduler-dedup:regions"}
    ran: Counter[datetime] = Counter()

    def tick(ctx: RunContext) -> None:
        ran[ctx.schedule_time] += 1

    env = parse_config(before).handler_env()
    assert "DEDUP_KEY_REGION" not in env
    old = App.from_env(env, clock, jobs={JOB: tick}, store_factory=lambda: firestore_store)
    when = clock().replace(second=0)
    first = deliver(old, scheduler_headers(job=JOB, schedule_time=stamp(when), region=FIRST))
    assert (first.status, first.outcome) == (200, "completed")

    for region in (FIRST, SECOND):
        app = region_app(region, firestore_store, clock, ran)
        again = deliver(app, scheduler_headers(job=JOB, schedule_time=stamp(when), region=region))
        assert (again.status, again.outcome) == (200, "duplicate_completed"), region
    assert ran == {when: 1}
