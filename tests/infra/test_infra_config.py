"""The pure-Python stack config model: defaults, derived values, and every rejection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dedup_schedule.config.model import ConfigError
from dedup_schedule.config.parser import parse_config
from runledger import facts
from runledger.schedules import parse_schedules

REPO = Path(__file__).resolve().parents[2]
NS = "scheduler-dedup:"


def minimal(**extra: Any) -> dict[str, Any]:
    """The smallest valid stack: project, region, one job."""
    values: dict[str, Any] = {
        "gcp:project": "my-project-1",
        "gcp:region": "us-central1",
        f"{NS}jobs": [{"id": "nightly-report", "schedule": "0 2 * * *"}],
    }
    values.update({f"{NS}{key}" if ":" not in key else key: value for key, value in extra.items()})
    return values


def with_job(**job: Any) -> dict[str, Any]:
    """A stack whose second job (index 1) has the given fields."""
    second = {"id": "hourly-sync", "schedule": "0 * * * *", **job}
    return minimal(jobs=[{"id": "nightly-report", "schedule": "0 2 * * *"}, second])


def test_a_new_stack_needs_only_project_region_and_jobs() -> None:
    config = parse_config(minimal())

    assert config.project == "my-project-1"
    assert config.region == "us-central1"
    assert config.name_prefix == "dedup"
    assert config.collection == "scheduler_runs"
    assert config.database.name == "(default)"
    assert config.database.create is True
    assert config.database.location == "us-central1"
    assert config.database.deletion_protection is True
    assert config.database.point_in_time_recovery is False
    assert config.project_header == "X-Dedup-Project"
    assert config.region_header == "X-Dedup-Region"
    assert config.manual_runs == "separate"
    (job,) = config.jobs
    assert job.time_zone == "UTC"
    assert job.attempt_deadline_s == 180
    assert job.body is None
    assert (job.retry.retry_count, job.retry.max_retry_duration_s) == (0, 0)
    assert (job.retry.min_backoff_s, job.retry.max_backoff_s, job.retry.max_doublings) == (
        5,
        3600,
        5,
    )


def test_request_timeout_defaults_to_the_largest_deadline_and_drives_the_lease() -> None:
    config = parse_config(with_job(attemptDeadline="20m"))

    assert config.request_timeout_s == 1200
    assert config.lease_seconds == 1200 + 60
    assert config.lease_seconds >= max(job.attempt_deadline_s for job in config.jobs)


def test_retention_covers_the_longest_retry_window_plus_the_margin() -> None:
    # 60 s deadline, 3 retries: backoffs 10, 20, 40 (doubling), so the last attempt
    # ends 60 + (10+60) + (20+60) + (40+60) = 310 s after the first started.
    config = parse_config(
        with_job(
            attemptDeadline="60s",
            retry={"retryCount": 3, "minBackoffDuration": "10s"},
        )
        | {f"{NS}retentionMargin": "1h", f"{NS}requestTimeout": "180s"}
    )

    assert config.jobs[1].retry_window_s == 310
    assert config.retention_seconds == max(310, config.lease_seconds) + 3600


def test_backoff_doubles_then_grows_linearly_up_to_the_maximum() -> None:
    config = parse_config(
        with_job(
            retry={
                "retryCount": 5,
                "minBackoffDuration": "10s",
                "maxBackoffDuration": "300s",
                "maxDoublings": 3,
            }
        )
    )
    retry = config.jobs[1].retry

    assert [retry.backoff_s(i) for i in range(8)] == [10, 20, 40, 80, 160, 240, 300, 300]


def test_retry_window_lasts_until_both_retry_limits_are_reached() -> None:
    by_count = parse_config(
        with_job(
            attemptDeadline="60s",
            retry={"retryCount": 5, "minBackoffDuration": "600s", "maxRetryDuration": "15m"},
        )
    )
    by_duration = parse_config(
        with_job(
            attemptDeadline="60s",
            retry={"retryCount": 1, "minBackoffDuration": "10s", "maxRetryDuration": "2h"},
        )
    )

    assert by_count.jobs[1].retry_window_s == 6 * 60 + 600 + 1200 + 2400 + 3600 + 3600
    assert by_duration.jobs[1].retry_window_s == 7200 + 60


def test_handler_env_carries_every_dedup_setting() -> None:
    config = parse_config(
        minimal(collection="runs", database={"name": "ledger-db"}, manualRuns="reject")
    )

    assert config.handler_env() == {
        "DEDUP_CONTRACT_VERSION": str(facts.CONTRACT_VERSION),
        "DEDUP_COLLECTION": "runs",
        "DEDUP_DATABASE": "ledger-db",
        "DEDUP_LEASE_SECONDS": str(config.lease_seconds),
        "DEDUP_HEARTBEAT_SECONDS": "60",
        "DEDUP_RETENTION_SECONDS": str(config.retention_seconds),
        "DEDUP_PROJECT_HEADER": "X-Dedup-Project",
        "DEDUP_REGION_HEADER": "X-Dedup-Region",
        "DEDUP_MANUAL_RUNS": "reject",
        "DEDUP_JOBS_MODULE": "jobs",
        "DEDUP_ALLOWED_PROJECTS": "my-project-1",
        "DEDUP_ALLOWED_REGIONS": "us-central1",
        "GOOGLE_CLOUD_PROJECT": "my-project-1",
        "DEDUP_SCHEDULES": json.dumps(
            [
                {
                    "id": "nightly-report",
                    "schedule": "0 2 * * *",
                    "timeZone": "UTC",
                    "retryWindowSeconds": 180,
                    "attemptDeadlineSeconds": 180,
                    "catchUp": False,
                    "catchUpMaxAgeSeconds": 3600,
                }
            ],
            separators=(",", ":"),
        ),
        "DEDUP_AUDIT_LOOKBACK_SECONDS": "21600",
        # The audit's Scheduler job, named from the default prefix.
        "DEDUP_AUDIT_JOB": "dedup-audit",
    }


def test_values_stored_as_strings_by_the_cli_are_parsed() -> None:
    jobs = [{"id": "a-job", "schedule": "*/5 * * * *", "retry": {"retryCount": "2"}}]
    config = parse_config(
        minimal(
            jobs=json.dumps(jobs),
            maxInstances="7",
            database=json.dumps({"create": "false"}),
            requestTimeout="300",
        )
    )

    assert config.jobs[0].retry.retry_count == 2
    assert config.max_instances == 7
    assert config.database.create is False
    assert config.request_timeout_s == 300


@pytest.mark.parametrize(
    "schedule",
    [
        "*/5 * * * *",
        "0 9 * * MON-FRI",
        "30 2 1,15 * *",
        "0 0 * JAN,jul 0",
        "0 12 * * 7",
        "5-55/10 8-18 * * 1-5",
    ],
)
def test_unix_cron_forms_are_accepted(schedule: str) -> None:
    assert parse_config(with_job(schedule=schedule)).jobs[1].schedule == schedule


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            with_job(schedule="every 5 minutes"),
            "scheduler-dedup:jobs[1].schedule: 'every 5 minutes' is groc syntax; "
            "Cloud Scheduler only guarantees the X-CloudScheduler-ScheduleTime header",
        ),
        (with_job(schedule="1st monday of month 09:00"), "jobs[1].schedule: '1st monday"),
        (with_job(schedule="0 0 * * * *"), "jobs[1].schedule: '0 0 * * * *' has 6 fields"),
        (with_job(schedule="60 * * * *"), "jobs[1].schedule: minute field '60' is outside 0-59"),
        (with_job(schedule="0 25 * * *"), "jobs[1].schedule: hour field '25' is outside 0-23"),
        (with_job(schedule="0 0 0 * *"), "day of month field '0' is outside 1-31"),
        (with_job(schedule="0 0 ? * MON"), "day of month field '?' uses Quartz syntax"),
        (with_job(schedule="0 0 * * 5-1"), "day of week field '5-1': range '5-1' runs backwards"),
        (with_job(schedule="*/0 * * * *"), "minute field '*/0': step '0' is not a positive number"),
        (with_job(schedule="@daily"), "cron macros are not supported"),
        (with_job(schedule=""), "jobs[1].schedule: required"),
        (with_job(attemptDeadline="10s"), "jobs[1].attemptDeadline: 10s is outside"),
        (with_job(attemptDeadline="31m"), "jobs[1].attemptDeadline: 1860s is outside"),
        (with_job(attemptDeadline="5 minutes"), "jobs[1].attemptDeadline: '5 minutes' is not a"),
        (with_job(retry={"retryCount": 6}), "jobs[1].retry.retryCount: 6 is outside the allowed"),
        (with_job(retry={"retryCount": -1}), "jobs[1].retry.retryCount: -1 is outside"),
        (with_job(retry={"retryCount": True}), "jobs[1].retry.retryCount: True is not a whole"),
        (
            with_job(retry={"minBackoffDuration": "1h", "maxBackoffDuration": "10m"}),
            "jobs[1].retry.maxBackoffDuration: 600s is shorter than minBackoffDuration 3600s",
        ),
        (with_job(retry={"maxRetryDuration": "-5s"}), "retry.maxRetryDuration: '-5s' is not a"),
        (with_job(retry={"retries": 2}), "jobs[1].retry.retries: unknown key"),
        (with_job(timeZone="Mars/Olympus_Mons"), "jobs[1].timeZone: 'Mars/Olympus_Mons' is not a"),
        (with_job(timeZone="CEST"), "jobs[1].timeZone: 'CEST' is not a tz database time zone"),
        (with_job(id="hourly sync!"), "jobs[1].id: 'hourly sync!' is not a Cloud Scheduler job"),
        (with_job(id="nightly-report"), "jobs[1].id: 'nightly-report' is used by another job"),
        (with_job(schedul="0 * * * *"), "jobs[1].schedul: unknown key"),
        (minimal(jobs=[]), "scheduler-dedup:jobs: required, a list of at least one job"),
        (minimal(jobs="[{"), "scheduler-dedup:jobs: not valid JSON"),
        (minimal(jobs={"id": "x"}), "scheduler-dedup:jobs: expected a list"),
        (minimal(jobs=["0 * * * *"]), "scheduler-dedup:jobs[0]: expected an object"),
        (
            minimal(requestTimeout="60s"),
            "scheduler-dedup:requestTimeout: 60s must be at least the largest attemptDeadline",
        ),
        (minimal(requestTimeout="2h"), "requestTimeout: 7200s must be at least"),
        (minimal(maxInstance=3), "scheduler-dedup:maxInstance: unknown key"),
        (minimal(maxInstances=0), "scheduler-dedup:maxInstances: 0 is outside the allowed"),
        (minimal(concurrency=8, cpu="0.5"), "scheduler-dedup:concurrency: 8 concurrent requests"),
        (minimal(manualRuns="sometimes"), "scheduler-dedup:manualRuns: 'sometimes' is not one of"),
        (minimal(database={"name": "Ledger_DB"}), "scheduler-dedup:database.name: 'Ledger_DB'"),
        (minimal(database={"name": "abc"}), "scheduler-dedup:database.name: 'abc' is not"),
        (
            # Firestore refuses UUID-like database ids even where the characters fit.
            minimal(database={"name": "abcdef12-3456-7890-abcd-ef1234567890"}),
            "database.name: 'abcdef12-3456-7890-abcd-ef1234567890' is not a Firestore database id",
        ),
        (minimal(database={"create": "yes"}), "scheduler-dedup:database.create: 'yes' is not"),
        (minimal(database={"pitr": True}), "scheduler-dedup:database.pitr: unknown key"),
        (minimal(collection="runs/2024"), "scheduler-dedup:collection: 'runs/2024' is not"),
        (
            minimal(projectHeader="X-CloudScheduler-JobName"),
            "scheduler-dedup:projectHeader: 'X-CloudScheduler-JobName' is set by Cloud Scheduler",
        ),
        (minimal(regionHeader="x-dedup-project"), "regionHeader: must differ from projectHeader"),
        (minimal(namePrefix="Dedup"), "scheduler-dedup:namePrefix: 'Dedup' is not a name prefix"),
        (minimal(namePrefix="a-very-long-prefix-xyz1"), "namePrefix: 'a-very-long-prefix-xyz1'"),
        (minimal(**{"gcp:project": None}), "gcp:project: required"),
        (minimal(**{"gcp:region": "Europe West"}), "gcp:region: 'Europe West' is not"),
        (minimal(ingress="public"), "scheduler-dedup:ingress: 'public' is not one of"),
        (
            minimal(database={"location": "us-central"}),
            "scheduler-dedup:database.location: 'us-central' is not a location Firestore offers",
        ),
    ],
)
def test_bad_config_fails_with_a_message_naming_the_key(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(values)

    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (minimal(maxInstance=3), "maxInstance: unknown key; did you mean 'maxInstances'?"),
        (with_job(timezone="UTC"), "jobs[1].timezone: unknown key; did you mean 'timeZone'?"),
        (
            with_job(timeZone="Europe/Berln"),
            "'Europe/Berln' is not a tz database time zone; did you mean 'Europe/Berlin'?",
        ),
        (with_job(timeZone="america/new_york"), "did you mean 'America/New_York'?"),
    ],
)
def test_a_near_miss_suggests_the_closest_key_or_time_zone(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(values)

    assert message in str(caught.value)


def test_nothing_close_suggests_nothing() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(minimal(zzzzzz=1))

    assert "did you mean" not in str(caught.value)


def test_a_renamed_project_whose_stack_keeps_the_old_namespace_says_so() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(minimal(), "acme-billing")

    message = str(caught.value)
    assert message.startswith("acme-billing:jobs: required; the stack file has scheduler-dedup:")
    assert "Pulumi.yaml names the project 'acme-billing'" in message
    assert "rename its keys to 'acme-billing:...'" in message


def test_groc_rejection_explains_how_to_write_it_in_cron() -> None:
    with pytest.raises(ConfigError, match=r"e\.g\. '\*/5 \* \* \* \*' for every 5 minutes"):
        parse_config(with_job(schedule="every 5 minutes"))


def test_own_keys_follow_the_project_name() -> None:
    values = {
        "gcp:project": "my-project-1",
        "gcp:region": "us-central1",
        "renamed:jobs": [{"id": "j", "schedule": "0 * * * *"}],
    }

    assert parse_config(values, project_name="renamed").jobs[0].id == "j"
    with pytest.raises(ConfigError, match="scheduler-dedup:jobs: required"):
        parse_config(values)


@pytest.mark.parametrize("location", ["nam5", "nam7", "eur3", "europe-west3", "me-central2"])
def test_firestore_locations_are_accepted(location: str) -> None:
    config = parse_config(minimal(database={"location": location}))
    assert config.database.location == location


def test_a_region_without_firestore_needs_an_explicit_database_location() -> None:
    # The database location defaults to the region, but not every Cloud Run functions
    # region offers Firestore ("Locations", Firestore docs); say so before deploying.
    values = minimal(**{"gcp:region": "europe-west5"})

    with pytest.raises(ConfigError) as caught:
        parse_config(values)

    message = str(caught.value)
    assert message.startswith("gcp:region: 'europe-west5' is not a Google Cloud region that ")
    assert "set scheduler-dedup:database.location to a Firestore location" in message
    assert "nam5" in message
    values[f"{NS}database"] = {"location": "eur3"}
    assert parse_config(values).database.location == "eur3"


def test_a_misspelt_region_is_named_with_the_nearest_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(minimal(**{"gcp:region": "europe-west99"}))
    message = str(caught.value)
    assert message.startswith("gcp:region: 'europe-west99' is not a Google Cloud region"), message
    assert "(nearest: europe-west9, " in message


def test_a_missing_region_names_the_misspelt_key_the_stack_sets() -> None:
    values = minimal(**{"gcp:regoin": "europe-west1", "gcp:zone": "europe-west1-b"})
    del values["gcp:region"]
    with pytest.raises(ConfigError) as caught:
        parse_config(values)
    assert str(caught.value) == (
        "gcp:region: required, expected a Google Cloud region; the stack sets 'gcp:regoin': "
        "did you mean 'gcp:region'?"
    )


def test_ingress_defaults_to_internal_only() -> None:
    assert parse_config(minimal()).ingress == "internal-only"
    assert parse_config(minimal(ingress="all")).ingress == "all"


def test_a_job_body_reaches_its_schedule_entry_and_the_handler_parses_it_back() -> None:
    config = parse_config(with_job(body='{"table": "crm"}'))
    entries = json.loads(config.handler_env()["DEDUP_SCHEDULES"])
    assert [entry.get("body") for entry in entries] == [None, '{"table": "crm"}']
    assert "body" not in entries[0], "an entry without a body stays as it was"
    parsed = parse_schedules(config.handler_env()["DEDUP_SCHEDULES"])
    assert [schedule.body for schedule in parsed] == [None, '{"table": "crm"}']


def test_bodies_that_would_overflow_the_functions_environment_limit_are_refused() -> None:
    jobs = [{"id": f"job-{n}", "schedule": "0 2 * * *", "body": "x" * 4000} for n in range(9)]
    with pytest.raises(ConfigError) as refused:
        parse_config(minimal(jobs=jobs))
    message = str(refused.value)
    assert message.startswith(f"{NS}jobs: the handler's environment would be about ")
    assert "32768-byte limit" in message
    parse_config(minimal(jobs=jobs[:7]))  # 28,000 bytes of bodies still fit
