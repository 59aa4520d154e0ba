"""DEDUP_* settings: defaults, and errors that name the variable."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from runledger import facts
from runledger.config import ManualRuns, Settings
from runledger.exceptions import ConfigError
from runledger.sdk.registry import Jobs, load_jobs
from tests.handler import machinery_jobs
from tests.handler.support import start_main

# The deployed function's source root: `main` and the default `jobs` are top-level there.
HANDLER_DIR = Path(__file__).resolve().parents[2] / "handler"


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


@pytest.mark.parametrize(
    "database",
    [
        "abc",  # too short: Firestore wants 4-63 characters
        "a" * 64,
        "ends-with-",
        "9starts-with-digit",
        "Upper-case",
        "0f8fad5b-d9cb-469f-a165-70867728950e",  # UUID-like ids are reserved
        "(DEFAULT)",
    ],
)
def test_database_ids_firestore_rejects_stop_start_up(database):
    with pytest.raises(ConfigError) as error:
        Settings.from_env({"DEDUP_DATABASE": database})
    assert str(error.value).startswith(f"DEDUP_DATABASE: {database!r} is not a Firestore database")


@pytest.mark.parametrize("database", ["(default)", "abcd", "ledger-db", "a" * 63, "runs-2026"])
def test_database_ids_firestore_accepts_are_taken(database):
    assert Settings.from_env({"DEDUP_DATABASE": database}).database == database


def test_manual_run_modes_are_the_shared_ones():
    assert tuple(mode.value for mode in ManualRuns) == facts.MANUAL_RUN_MODES
    for mode in facts.MANUAL_RUN_MODES:
        assert Settings.from_env({"DEDUP_MANUAL_RUNS": mode}).manual_runs == mode


def test_deployed_entry_point_refuses_a_database_id_firestore_rejects():
    result = start_main(DEDUP_DATABASE="abc")
    assert result.returncode != 0
    assert result.stderr.strip() == (
        "handler configuration error: DEDUP_DATABASE: 'abc' is not a Firestore database id "
        f"({facts.DATABASE_ID_RULE})"
    )


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
