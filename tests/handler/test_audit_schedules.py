"""DEDUP_SCHEDULES: the contract's defaults, and a message naming the entry for each mistake."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from runledger.exceptions import ConfigError
from runledger.schedules import audit_settings, parse_schedules
from tests.handler.support import settings

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
