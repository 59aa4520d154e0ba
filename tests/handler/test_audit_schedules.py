"""DEDUP_SCHEDULES: the contract's defaults, and a message naming the entry for each mistake."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from runledger.exceptions import ConfigError
from runledger.ledger.memory_store import MemoryRunStore
from runledger.schedules import audit_settings, check_jobs, parse_schedules
from tests.handler.support import FakeClock, deliver, make_app, scheduler_headers, settings

ENTRY = {
    "id": "etl",
    "schedule": "0 2 * * *",
    "timeZone": "Europe/Berlin",
    "retryWindowSeconds": 540,
}
SCOPE = {"DEDUP_ALLOWED_PROJECTS": "acme-prod", "DEDUP_ALLOWED_REGIONS": "europe-west1"}


def test_optional_keys_default_to_scheduler_and_off():
    (job,) = parse_schedules(json.dumps([ENTRY]))
    assert job.attempt_deadline == timedelta(seconds=180)
    assert (job.catch_up, job.catch_up_max_age) == (False, timedelta(hours=1))
    assert parse_schedules("") == ()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schedule": "every 5 minutes"}, r"DEDUP_SCHEDULES\[0\] \('etl'\): schedule .*groc"),
        ({"timeZone": "Mars/Olympus"}, r"\('etl'\): timeZone 'Mars/Olympus' is not a tz"),
        ({"retryWindowSeconds": "540"}, r"retryWindowSeconds '540' is not a number"),
        ({"retryWindowSeconds": 100}, r"retryWindowSeconds 100 must be at least 180"),
        ({"attemptDeadlineSeconds": 5}, r"attemptDeadlineSeconds 5 must be 15 to 1800"),
        ({"catchUp": "yes"}, r"catchUp 'yes' is not true or false"),
        ({"catchup": True}, r"unknown key\(s\) catchup"),
        ({"id": "runledger-audit"}, r"reserved for the audit"),
        ({"id": "bad id"}, r"id 'bad id' is not a Cloud Scheduler job id"),
        ({"schedule": "0 9 31 6 *"}, r"\('etl'\): schedule '0 9 31 6 \*' can never fire"),
        ({"schedule": "0 0 */2 * 1"}, r"\('etl'\): schedule '0 0 \*/2 \* 1' is ambiguous"),
        ({"schedule": "0 0 15 * */3"}, r"day-of-week '\*/3' is a step over '\*'"),
    ],
)
def test_each_mistake_names_the_entry_and_the_key(change, message):
    with pytest.raises(ConfigError, match=message):
        parse_schedules(json.dumps([ENTRY | change]))


def test_missing_keys_duplicates_and_bad_json_are_refused():
    with pytest.raises(ConfigError, match=r"DEDUP_SCHEDULES\[0\] \('etl'\): missing timeZone"):
        parse_schedules(json.dumps([{k: v for k, v in ENTRY.items() if k != "timeZone"}]))
    with pytest.raises(ConfigError, match="job 'etl' is listed twice"):
        parse_schedules(json.dumps([ENTRY, ENTRY]))
    with pytest.raises(ConfigError, match="DEDUP_SCHEDULES: not valid JSON"):
        parse_schedules("[{")
    with pytest.raises(ConfigError, match="must be a JSON list"):
        parse_schedules(json.dumps(ENTRY))


def test_run_keys_need_exactly_one_project_and_region():
    env = {"DEDUP_SCHEDULES": json.dumps([ENTRY])}
    with pytest.raises(ConfigError, match="DEDUP_ALLOWED_PROJECTS to exactly one value"):
        audit_settings(env, settings())
    config = audit_settings(env | SCOPE, settings(**SCOPE))
    assert (config.project, config.region) == ("acme-prod", "europe-west1")


def test_windows_must_fit_inside_the_retention():
    # The test settings keep records for one day.
    with pytest.raises(ConfigError, match="DEDUP_AUDIT_LOOKBACK_SECONDS: must be shorter"):
        audit_settings({"DEDUP_AUDIT_LOOKBACK_SECONDS": "86400"}, settings())
    short = settings(DEDUP_RETENTION_SECONDS="3600")
    assert audit_settings({}, short).lookback == timedelta(seconds=3600) - short.lease
    late = ENTRY | {"catchUp": True, "catchUpMaxAgeSeconds": 86200}
    with pytest.raises(ConfigError, match=r"\('etl'\): catchUpMaxAgeSeconds plus the lease"):
        audit_settings({"DEDUP_SCHEDULES": json.dumps([late])} | SCOPE, settings(**SCOPE))


# --- DEDUP_AUDIT_JOB: the audit's job id, one per stack ---------------------------------------


def test_the_audit_job_id_comes_from_dedup_audit_job():
    env = {"DEDUP_SCHEDULES": json.dumps([ENTRY]), **SCOPE}
    assert audit_settings(env, settings(**SCOPE)).job == "runledger-audit"
    assert audit_settings(env | {"DEDUP_AUDIT_JOB": ""}, settings(**SCOPE)).job == "runledger-audit"
    chosen = audit_settings(env | {"DEDUP_AUDIT_JOB": " blue-audit "}, settings(**SCOPE))
    assert chosen.job == "blue-audit"
    with pytest.raises(ConfigError, match=r"^DEDUP_AUDIT_JOB: 'blue audit' is not a Cloud"):
        audit_settings(env | {"DEDUP_AUDIT_JOB": "blue audit"}, settings(**SCOPE))


def test_no_job_may_take_the_configured_audit_id():
    taken = {"DEDUP_SCHEDULES": json.dumps([ENTRY | {"id": "blue-audit"}]), **SCOPE}
    with pytest.raises(ConfigError, match=r"\('blue-audit'\): id 'blue-audit' is reserved"):
        audit_settings(taken | {"DEDUP_AUDIT_JOB": "blue-audit"}, settings(**SCOPE))
    # With another audit id, the default one is an ordinary job id again.
    other = {"DEDUP_SCHEDULES": json.dumps([ENTRY | {"id": "runledger-audit"}]), **SCOPE}
    audit = audit_settings(other | {"DEDUP_AUDIT_JOB": "blue-audit"}, settings(**SCOPE))
    assert [schedule.id for schedule in audit.schedules] == ["runledger-audit"]
    with pytest.raises(ConfigError, match=r"JOBS defines 'blue-audit', a job id reserved"):
        check_jobs(audit, {"runledger-audit": print, "blue-audit": print}, "jobs")


def test_the_handler_serves_the_audit_under_its_configured_id(capsys):
    env = {"DEDUP_SCHEDULES": json.dumps([ENTRY | {"id": "nightly-report"}]), **SCOPE}
    env |= {"DEDUP_AUDIT_JOB": "blue-audit"}
    audit = audit_settings(env, settings(**SCOPE))
    app = make_app(MemoryRunStore(), {"nightly-report": print}, FakeClock(), audit=audit, **SCOPE)
    capsys.readouterr()

    audited = deliver(app, scheduler_headers(job="blue-audit"))
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    default = deliver(app, scheduler_headers(job="runledger-audit"))

    assert audited.status == 200
    (summary,) = [line for line in lines if line.get("outcome") == "audit_summary"]
    assert summary["job"] == "blue-audit"
    # Another stack's audit id (or the default one) is not this handler's job.
    assert default.status == 404
