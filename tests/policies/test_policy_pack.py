"""The pack as a unit: importing it is safe, its entry point builds one pack with every
policy, and the helpers it relies on agree with the handler and the platform."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pulumi_policy import EnforcementLevel, StackValidationPolicy

from dedup_policies import handler_settings, pack_arguments, policies
from dedup_policies.facts import cron_meaning_problem, unix_cron_problem
from dedup_policies.scheduler_job import retry_window_seconds
from scheduler_dedup.offline.pack_loader import load_pack
from tests.stacks import PACK_DIR

REPO_ROOT = Path(__file__).resolve().parents[2]


def _import_every_pack_module(prelude: str) -> int:
    """In a fresh interpreter, run `prelude`, import every module of the pack, count policies."""
    script = (
        prelude + "import pkgutil, importlib, dedup_policies\n"
        "for m in pkgutil.iter_modules(dedup_policies.__path__):\n"
        "    importlib.import_module('dedup_policies.' + m.name)\n"
        "print(len(dedup_policies.policies()))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=PACK_DIR,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def test_importing_the_rules_never_constructs_the_pack() -> None:
    # Constructing PolicyPack (which would serve gRPC and block forever) raises in the
    # fresh interpreter; importing every rule module must not trigger it.
    prelude = (
        "import pulumi_policy\n"
        "def refuse(*a, **k):\n"
        "    raise SystemExit('PolicyPack constructed on import')\n"
        "pulumi_policy.PolicyPack = refuse\n"
    )
    assert _import_every_pack_module(prelude) == len(policies())


def test_the_pack_needs_nothing_from_the_rest_of_the_repository() -> None:
    # The pack is installed on its own (policies/requirements.txt): every module of it,
    # its copy of the shared facts included, must import with the repository's other
    # packages unavailable, although the dev venv has them installed.
    prelude = (
        "import sys\n"
        "for name in ('runledger', 'dedup_schedule', 'scheduler_dedup', 'bench'):\n"
        "    sys.modules[name] = None\n"
    )
    assert _import_every_pack_module(prelude) == len(policies())


def test_entry_point_builds_exactly_this_pack() -> None:
    loaded = load_pack(PACK_DIR)
    assert loaded.arguments["name"] == pack_arguments()["name"]
    assert [p.name for p in loaded.arguments["policies"]] == [p.name for p in policies()]


def test_policies_are_named_described_and_levelled() -> None:
    names = [p.name for p in policies()]
    assert len(names) == len(set(names))
    for policy in policies():
        assert policy.description.endswith(".")
        assert policy.enforcement_level in (EnforcementLevel.MANDATORY, EnforcementLevel.ADVISORY)
        if policy.config_schema is not None:
            for prop in policy.config_schema.properties.values():
                assert "default" in prop, policy.name


def test_stack_policies_report_against_resources() -> None:
    stack_policies = [p.name for p in policies() if isinstance(p, StackValidationPolicy)]
    assert "ledger-ttl-policy" in stack_policies
    assert "iam-project-grants-least-privilege" in stack_policies


def test_handler_defaults_match_the_handler() -> None:
    from runledger.config import Settings

    handler = Settings.from_env({})
    ours = handler_settings.HandlerSettings.from_env({})
    assert ours.collection == handler.collection
    assert ours.database == handler.database
    assert ours.lease_seconds == handler.lease.total_seconds()
    assert ours.retention_seconds == handler.retention.total_seconds()
    assert ours.project_header == handler.project_header
    assert ours.region_header == handler.region_header


@pytest.mark.parametrize(
    "schedule", ["*/5 * * * *", "30 2 * * *", "0 7 * * 1-5", "0 0 1 JAN,jul sun", "0-30/10 * * * 7"]
)
def test_unix_cron_accepted(schedule: str) -> None:
    assert unix_cron_problem(schedule) == ""
    assert cron_meaning_problem(schedule) == ""


@pytest.mark.parametrize(
    "schedule",
    # Feb 29th comes every 4 years; August 31st in a stepped month list; either field
    # matching (both restricted); a step over '*' with the other day field '*'.
    ["0 0 29 2 *", "0 0 31 4/2 *", "0 9 31 6 1", "0 0 1-31/2 * 1", "0 0 */2 * *", "0 0 * * */2"],
)
def test_schedules_that_fire_and_mean_one_thing_are_accepted(schedule: str) -> None:
    assert cron_meaning_problem(schedule) == ""


@pytest.mark.parametrize(
    ("schedule", "says"),
    [
        ("0 9 31 6 *", "can never fire"),
        ("0 0 30,31 FEB *", "can never fire"),
        ("0 0 31 4-6/2 *", "can never fire"),
        ("0 0 */2 * 1", "'1-31/2'"),
        ("0 0 15 * */3", "'0-6/3'"),
        ("0 0 */2 * */3", "is ambiguous"),
    ],
)
def test_schedules_that_never_fire_or_are_ambiguous_are_refused(schedule: str, says: str) -> None:
    assert says in cron_meaning_problem(schedule)


@pytest.mark.parametrize(
    "schedule",
    [
        "every 5 minutes",
        "@hourly",
        "* * * *",
        "60 * * * *",
        "* 24 * * *",
        "*/0 * * * *",
        "5-1 * * * *",
    ],
)
def test_non_unix_cron_rejected(schedule: str) -> None:
    assert unix_cron_problem(schedule) != ""


@pytest.mark.parametrize(
    ("props", "window"),
    [
        # No retry config: one attempt of the default 180 s deadline.
        ({}, 180),
        # 3 retries, backoff 60, 120, 240 (two doublings): 4 x 900 + 420.
        (
            {
                "attemptDeadline": "900s",
                "retryConfig": {
                    "retryCount": 3.0,
                    "minBackoffDuration": "60s",
                    "maxBackoffDuration": "600s",
                    "maxDoublings": 2.0,
                },
            },
            4020,
        ),
        # Both limits set: retries go on until both are reached, so the longer one counts.
        (
            {
                "attemptDeadline": "900s",
                "retryConfig": {
                    "retryCount": 3.0,
                    "maxRetryDuration": "1000s",
                    "minBackoffDuration": "60s",
                    "maxBackoffDuration": "600s",
                    "maxDoublings": 2.0,
                },
            },
            4020,
        ),
        (
            {
                "attemptDeadline": "900s",
                "retryConfig": {
                    "retryCount": 3.0,
                    "maxRetryDuration": "7200s",
                    "minBackoffDuration": "60s",
                    "maxBackoffDuration": "600s",
                    "maxDoublings": 2.0,
                },
            },
            8100,
        ),
        # Linear growth after the doublings, then the max: 10, 20, 40, 80, 160, 240, 300.
        (
            {
                "attemptDeadline": "15s",
                "retryConfig": {
                    "retryCount": 5.0,
                    "minBackoffDuration": "10s",
                    "maxBackoffDuration": "300s",
                    "maxDoublings": 3.0,
                },
            },
            6 * 15 + 10 + 20 + 40 + 80 + 160,
        ),
    ],
)
def test_retry_window_upper_bound(props: dict, window: float) -> None:
    assert retry_window_seconds(props) == window


def test_max_doublings_0_is_read_as_the_5_scheduler_applies_when_the_provider_drops_it() -> None:
    def window(doublings: float) -> float:
        retry = {"retryCount": 5.0, "minBackoffDuration": "10s", "maxDoublings": doublings}
        return retry_window_seconds({"attemptDeadline": "15s", "retryConfig": retry})

    assert window(0.0) == window(5.0) == 6 * 15 + 10 + 20 + 40 + 80 + 160


def test_retry_window_of_out_of_range_counts_stays_within_the_platform_limits() -> None:
    # scheduler-retry-limits reports these; the window must still be computed at once.
    props = {
        "attemptDeadline": "10s",
        "retryConfig": {
            "retryCount": 1e9,
            "minBackoffDuration": "1s",
            "maxBackoffDuration": "1000000s",
            "maxDoublings": 1e9,
        },
    }
    # At most 5 retries (the platform's limit), backoff 1, 2, 4, 8, 16.
    assert retry_window_seconds(props) == 6 * 10 + 31


def test_an_edited_copy_of_the_pack_loads_its_own_code(tmp_path: Path) -> None:
    copy = tmp_path / "policies"
    shutil.copytree(PACK_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "venv"))
    pack_module = copy / "dedup_policies" / "pack.py"
    pack_module.write_text(
        pack_module.read_text().replace('PACK_NAME = "gcp-scheduler-dedup"', 'PACK_NAME = "edited"')
    )
    assert load_pack(copy).arguments["name"] == "edited"
    assert load_pack(PACK_DIR).arguments["name"] == "gcp-scheduler-dedup"
