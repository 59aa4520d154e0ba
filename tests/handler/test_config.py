"""DEDUP_* settings: defaults, and errors that name the variable."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runledger.config import ManualRuns, Settings
from runledger.exceptions import ConfigError
from runledger.jobs import Jobs, load_jobs
from tests.handler import machinery_jobs


def test_defaults_match_the_documented_contract():
    settings = Settings.from_env({})
    assert settings.collection == "scheduler_runs"
    assert settings.database == "(default)"
    assert settings.project_header == "X-Dedup-Project"
    assert settings.region_header == "X-Dedup-Region"
    assert settings.manual_runs is ManualRuns.SEPARATE
    assert settings.jobs_module == "jobs"
    assert settings.lease == timedelta(seconds=360)
    assert settings.allowed_invokers == frozenset()


def test_lists_are_comma_separated():
    settings = Settings.from_env({"DEDUP_ALLOWED_INVOKERS": " a@x.iam.gserviceaccount.com, b@y ,"})
    assert settings.allowed_invokers == {"a@x.iam.gserviceaccount.com", "b@y"}


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"DEDUP_LEASE_SECONDS": "five"}, "DEDUP_LEASE_SECONDS"),
        ({"DEDUP_LEASE_SECONDS": "0"}, "DEDUP_LEASE_SECONDS"),
        ({"DEDUP_RETENTION_SECONDS": "-1"}, "DEDUP_RETENTION_SECONDS"),
        (
            {"DEDUP_LEASE_SECONDS": "900", "DEDUP_RETENTION_SECONDS": "600"},
            "DEDUP_RETENTION_SECONDS",
        ),
        ({"DEDUP_COLLECTION": "runs/nested"}, "DEDUP_COLLECTION"),
        ({"DEDUP_DATABASE": "Bad_DB"}, "DEDUP_DATABASE"),
        ({"DEDUP_PROJECT_HEADER": "X Bad"}, "DEDUP_PROJECT_HEADER"),
        ({"DEDUP_REGION_HEADER": "x-dedup-project"}, "DEDUP_REGION_HEADER"),
        ({"DEDUP_MANUAL_RUNS": "sometimes"}, "DEDUP_MANUAL_RUNS"),
        ({"DEDUP_JOBS_MODULE": "not a module"}, "DEDUP_JOBS_MODULE"),
    ],
)
def test_bad_values_name_the_variable(env, variable):
    with pytest.raises(ConfigError) as error:
        Settings.from_env(env)
    assert str(error.value).startswith(f"{variable}:")


def test_jobs_module_must_import_and_expose_jobs():
    with pytest.raises(ConfigError, match="DEDUP_JOBS_MODULE: cannot import"):
        load_jobs("no_such_jobs_module")
    with pytest.raises(ConfigError, match="has no JOBS dict"):
        load_jobs("json")
    assert set(load_jobs(machinery_jobs.MODULE)) == {"machinery-once", "machinery-logs"}


def test_jobs_decorator_refuses_bad_and_duplicate_ids():
    jobs = Jobs()
    jobs.job("a")(print)
    with pytest.raises(ValueError, match="registered twice"):
        jobs.job("a")
    with pytest.raises(ValueError, match="not a valid Cloud Scheduler job id"):
        jobs.job("a/b")
