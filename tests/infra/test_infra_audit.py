"""The stack's audit side: DEDUP_SCHEDULES, the audit job, the handler-job check, monitoring.

The program runs under mocks on a copy of the project (see conftest.py); the
settings it writes for the handler are read back with the handler's own parser,
and the log fields the metrics count are checked against lines the handler writes.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import UTC, datetime
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest

from dedup_schedule.config.model import ConfigError
from dedup_schedule.config.parser import parse_config
from runledger import facts
from runledger.audit.findings import AuditReport, Finding
from runledger.audit.report import log_report
from runledger.config import Settings
from runledger.exceptions import StoreUnavailable, TerminalJobError
from runledger.ledger.memory_store import MemoryRunStore
from runledger.schedules import AUDIT_JOB_ID, audit_settings
from scheduler_dedup.offline.mockrun import CapturedResource, ProgramFailed, run_program
from tests.clitools import run_module
from tests.handler.support import FakeClock, deliver, make_app
from tests.infra.conftest import SharedRuns, tree_digest, write_handler

NS = "scheduler-dedup:"
FUNCTION = "gcp:cloudfunctionsv2/function:Function"
JOB = "gcp:cloudscheduler/job:Job"
METRIC = "gcp:logging/metric:Metric"
POLICY = "gcp:monitoring/alertPolicy:AlertPolicy"
CHANNEL = "gcp:monitoring/notificationChannel:NotificationChannel"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
CHANNEL_ID = "projects/dedup-test-project/notificationChannels/123456"


@pytest.fixture
def run(
    make_stack: Callable[[dict[str, Any]], Path],
    multi_job_config: dict[str, Any],
    project_copy: Path,
    shared_run: SharedRuns,
):
    """Run the program on the multi-job stack, changed by `**extra` keys (without namespace).

    While the test left its project copy untouched, the run is the shared one for that config.
    """

    def go(**extra: Any) -> list[CapturedResource]:
        config = {**multi_job_config, **{f"{NS}{key}": value for key, value in extra.items()}}
        if tree_digest(project_copy) == shared_run.pristine:
            return shared_run(config)
        return run_program(make_stack(config), "test")

    return go


def environment(resources: list[CapturedResource]) -> dict[str, str]:
    (function,) = [r for r in resources if r.type == FUNCTION]
    return function.inputs["serviceConfig"]["environmentVariables"]


def jobs_by_name(resources: list[CapturedResource]) -> dict[str, dict[str, Any]]:
    return {r.inputs["name"]: r.inputs for r in resources if r.type == JOB}


def conditions(policy: CapturedResource) -> list[dict[str, Any]]:
    return policy.inputs["conditions"]


def condition_filter(condition: dict[str, Any]) -> str:
    kind = condition.get("conditionThreshold") or condition["conditionAbsent"]
    return kind["filter"]


# --- DEDUP_SCHEDULES: the program's env, read by the handler's own parser -----------------


def test_the_handler_reads_the_schedules_the_stack_deploys(run, multi_job_config) -> None:
    jobs = multi_job_config[f"{NS}jobs"]
    jobs[1].update(catchUp=True, catchUpMaxAge="90m")

    env = environment(run(jobs=jobs, audit={"lookback": "8h"}))
    audit = audit_settings(env, Settings.from_env(env))

    by_id = {schedule.id: schedule for schedule in audit.schedules}
    assert list(by_id) == ["nightly-report", "hourly-sync", "invoice-export"]
    nightly = by_id["nightly-report"]
    assert (nightly.schedule, nightly.time_zone) == ("15 1 * * *", "Europe/Berlin")
    # retryCount 3 within maxRetryDuration 2h: the window ends 2h + one 10m deadline later.
    assert nightly.retry_window.total_seconds() == 7200 + 600
    assert nightly.attempt_deadline.total_seconds() == 600
    assert not nightly.catch_up
    sync = by_id["hourly-sync"]
    assert sync.catch_up and sync.catch_up_max_age.total_seconds() == 90 * 60
    assert audit.lookback.total_seconds() == 8 * 3600
    assert (audit.project, audit.region) == ("dedup-test-project", "europe-west3")


def test_every_configured_job_is_in_dedup_schedules_and_the_audit_is_not(
    run, multi_job_config
) -> None:
    env = environment(run())
    entries = json.loads(env["DEDUP_SCHEDULES"])

    assert [entry["id"] for entry in entries] == ["nightly-report", "hourly-sync", "invoice-export"]
    # A job's body rides along only when it has one, for the runs the audit starts itself.
    bodies = [job.get("body") for job in multi_job_config[f"{NS}jobs"]]
    assert [entry.get("body") for entry in entries] == bodies and any(bodies)
    assert all(
        set(entry) - {"body"}
        == {
            "id",
            "schedule",
            "timeZone",
            "retryWindowSeconds",
            "attemptDeadlineSeconds",
            "catchUp",
            "catchUpMaxAgeSeconds",
        }
        for entry in entries
    )


def test_a_paused_job_is_created_paused_and_the_handler_reads_it_so(run, multi_job_config) -> None:
    jobs = multi_job_config[f"{NS}jobs"]
    jobs[1].update(paused=True)

    resources = run(jobs=jobs)

    scheduled = jobs_by_name(resources)
    assert scheduled["hourly-sync"]["paused"] is True
    # Sent as false too: the provider's `paused` is Optional+Computed, so an unset value
    # would leave a job the stack paused before paused (resource_cloud_scheduler_job.go).
    assert scheduled["nightly-report"]["paused"] is False
    entries = {
        entry["id"]: entry for entry in json.loads(environment(resources)["DEDUP_SCHEDULES"])
    }
    assert entries["hourly-sync"]["paused"] is True
    assert "paused" not in entries["nightly-report"]
    env = environment(resources)
    by_id = {s.id: s for s in audit_settings(env, Settings.from_env(env)).schedules}
    assert by_id["hourly-sync"].paused and not by_id["nightly-report"].paused


def test_a_job_the_stack_paused_is_resumed_by_paused_false_or_by_removing_it(
    run, multi_job_config
) -> None:
    jobs = multi_job_config[f"{NS}jobs"]
    jobs[0].update(paused=False)
    jobs[1].pop("paused", None)

    scheduled = jobs_by_name(run(jobs=jobs))

    # Both send an explicit false, which the provider turns into a ResumeJob call.
    assert scheduled["nightly-report"]["paused"] is False
    assert scheduled["hourly-sync"]["paused"] is False


def test_make_plan_shows_each_jobs_paused_state_on_the_scheduler_job(
    make_stack, multi_job_config
) -> None:
    jobs = multi_job_config[f"{NS}jobs"]
    jobs[1].update(paused=True)
    path = make_stack({**multi_job_config, f"{NS}jobs": jobs})

    result = run_module(
        "scheduler_dedup.offline.plan", "--dir", str(path), "--stack", "test", timeout_s=120
    )

    assert result.returncode == 0, result.stderr
    # Each Scheduler job's settings follow its line: `name`, then `paused` among them.
    shown: dict[str, str] = {}
    current, previous = None, ""
    for line in result.stdout.splitlines():
        setting = line.strip()
        if setting.startswith("+ "):
            current = None
        if setting.startswith("name:") and "cloudscheduler/job:Job" in previous:
            current = setting.removeprefix("name:").strip()
        if current is not None and setting.startswith("paused:"):
            shown[current] = setting.removeprefix("paused:").strip()
        previous = line
    assert shown["hourly-sync"] == "true"
    assert shown["nightly-report"] == "false"


def test_a_paused_value_that_is_not_a_boolean_names_its_key(run, multi_job_config) -> None:
    jobs = multi_job_config[f"{NS}jobs"]
    jobs[0].update(paused="sometimes")
    with pytest.raises(ProgramFailed, match=r"scheduler-dedup:jobs\[0\]\.paused"):
        run(jobs=jobs)


def test_the_runtime_account_may_only_list_scheduler_jobs_when_the_audit_runs(run) -> None:
    def scheduler_grants(resources: list[CapturedResource]) -> list[dict[str, Any]]:
        roles = {
            f"projects/{r.inputs['project']}/roles/{r.inputs['roleId']}": r.inputs["permissions"]
            for r in resources
            if r.type == "gcp:projects/iAMCustomRole:IAMCustomRole"
        }
        return [
            {**r.inputs, "permissions": roles.get(r.inputs["role"])}
            for r in resources
            if r.type == "gcp:projects/iAMMember:IAMMember"
            and (
                r.inputs["role"].startswith("roles/cloudscheduler.")
                or "cloudscheduler.jobs.list" in (roles.get(r.inputs["role"]) or [])
            )
        ]

    # A custom role holding only the listing the audit calls: no predefined Scheduler
    # role, whose jobs.fullView would read other workloads' targets.
    (grant,) = scheduler_grants(run())
    assert grant["permissions"] == ["cloudscheduler.jobs.list"]
    assert grant["project"] == "dedup-test-project"
    assert grant["member"].startswith("serviceAccount:dedup-runtime@")
    assert scheduler_grants(run(audit={"enabled": False})) == []


def test_the_runtime_account_may_read_scheduler_audit_log_entries_and_nothing_more(run) -> None:
    def log_grants(resources: list[CapturedResource]) -> list[tuple[dict[str, Any], Any]]:
        roles = {
            r.name: r.inputs
            for r in resources
            if r.type == "gcp:projects/iAMCustomRole:IAMCustomRole"
            and "logging.logEntries.list" in r.inputs["permissions"]
        }
        return [
            (r.inputs, roles[name])
            for r in resources
            if r.type == "gcp:projects/iAMMember:IAMMember"
            for name in roles
            if roles[name]["roleId"] in r.inputs["role"]
        ]

    ((grant, role),) = log_grants(run())
    # Admin Activity entries need logging.logEntries.list alone (not privateLogEntries).
    assert role["permissions"] == ["logging.logEntries.list"]
    assert role["project"] == grant["project"] == "dedup-test-project"
    assert grant["member"].startswith("serviceAccount:dedup-runtime@")
    assert "condition" not in grant
    assert log_grants(run(audit={"enabled": False})) == []


# --- the audit's Scheduler job --------------------------------------------------------------


def test_the_audit_job_calls_the_handler_as_every_job_does(run) -> None:
    jobs = jobs_by_name(run(audit={"schedule": "*/20 * * * *"}))

    # Named from the stack's prefix: Scheduler job ids are unique per project and region.
    audit, nightly = jobs["dedup-audit"], jobs["nightly-report"]
    assert audit["schedule"] == "*/20 * * * *"
    assert audit["timeZone"] == "UTC"
    assert audit["httpTarget"]["uri"] == nightly["httpTarget"]["uri"]
    assert audit["httpTarget"]["oidcToken"] == nightly["httpTarget"]["oidcToken"]
    assert {k: v for k, v in audit["httpTarget"]["headers"].items() if k != "Content-Type"} == {
        k: v for k, v in nightly["httpTarget"]["headers"].items() if k != "Content-Type"
    }
    # Never retried: the next audit looks at the same runs again.
    assert audit["retryConfig"]["retryCount"] == 0


def test_a_disabled_audit_deploys_no_job_and_no_absence_alert(run) -> None:
    resources = run(audit={"enabled": False})

    assert AUDIT_JOB_ID not in jobs_by_name(resources)
    assert "dedup-audit" not in jobs_by_name(resources)
    policies = [r for r in resources if r.type == POLICY]
    assert policies
    assert not any("conditionAbsent" in c for p in policies for c in conditions(p))
    # The handler still knows the schedules (start-up check, CLI).
    assert json.loads(environment(resources)["DEDUP_SCHEDULES"])


# --- plan time: the handler must define every job -------------------------------------------


def test_a_job_the_handler_lacks_stops_the_program_naming_it(run, multi_job_config) -> None:
    jobs = [*multi_job_config[f"{NS}jobs"], {"id": "ghost-job", "schedule": "0 3 * * *"}]

    with pytest.raises(ProgramFailed) as caught:
        run(jobs=jobs)

    message = str(caught.value)
    assert f"{NS}jobs[3].id: 'ghost-job' is not defined in handler/jobs.py" in message
    assert "404" in message


def test_a_function_no_job_schedules_gets_one_warning_line_in_make_plan(
    make_stack, multi_job_config, project_copy: Path
) -> None:
    jobs = "".join(
        f"JOBS[{job!r}] = print\n"
        for job in ("nightly-report", "hourly-sync", "invoice-export", "weekly-cleanup")
    )
    write_handler(project_copy / "handler", {"jobs.py": "JOBS = {}\n" + jobs})
    make_stack(multi_job_config)

    plan = run_module("scheduler_dedup.offline.plan", "--dir", str(project_copy), timeout_s=300)

    assert plan.returncode == 0, plan.stderr
    warnings = [line for line in plan.stderr.splitlines() if "JOBS defines" in line]
    assert warnings == [
        "warning: handler/jobs.py: JOBS defines 'weekly-cleanup', which no entry of "
        f"{NS}jobs schedules, so it never runs; add it to the stack or remove it"
    ]


def test_a_handler_defining_the_audit_id_stops_the_program(run, project_copy: Path) -> None:
    write_handler(
        project_copy / "handler",
        {
            "jobs.py": "JOBS = {j: print for j in "
            f"('nightly-report', 'hourly-sync', 'invoice-export', '{AUDIT_JOB_ID}')}}\n"
        },
    )

    with pytest.raises(ProgramFailed, match=f"{NS}handlerDir: .*'{AUDIT_JOB_ID}'"):
        run()


def test_a_jobs_module_that_cannot_load_is_a_clear_error(run, project_copy: Path) -> None:
    write_handler(project_copy / "handler", {"jobs.py": "import not_installed_anywhere\n"})

    with pytest.raises(ProgramFailed) as caught:
        run()

    message = str(caught.value)
    assert message.startswith(f"{NS}handlerDir: handler/jobs.py:1: ModuleNotFoundError")
    assert "not_installed_anywhere" in message
    assert "Traceback" not in message


# --- config errors name the key ---------------------------------------------------------


def minimal(**extra: Any) -> dict[str, Any]:
    return {
        "gcp:project": "my-project-1",
        "gcp:region": "us-central1",
        f"{NS}jobs": [{"id": "nightly-report", "schedule": "0 2 * * *"}],
        **{f"{NS}{key}": value for key, value in extra.items()},
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"jobs": [{"id": AUDIT_JOB_ID, "schedule": "0 2 * * *"}]},
            f"{NS}jobs[0].id: '{AUDIT_JOB_ID}' is reserved",
        ),
        (
            {
                "jobs": [{"id": "a", "schedule": "0 2 * * *", "catchUp": True}],
                "audit": {"enabled": False},
            },
            f"{NS}jobs[0].catchUp: catch-up runs inside the audit",
        ),
        (
            {
                "jobs": [
                    {"id": "a", "schedule": "0 2 * * *", "catchUp": True, "catchUpMaxAge": "2d"}
                ],
            },
            f"{NS}jobs[0].catchUpMaxAge: '2d' is not a duration",
        ),
        (
            {
                "jobs": [
                    {"id": "a", "schedule": "0 2 * * *", "catchUp": True, "catchUpMaxAge": "48h"}
                ],
            },
            f"{NS}jobs[0].catchUpMaxAge: 172800s plus the",
        ),
        ({"audit": {"schedule": "every 30 minutes"}}, f"{NS}audit.schedule: 'every 30 minutes'"),
        ({"audit": {"lookback": "30m"}}, f"{NS}audit.lookback: 1800s is too short"),
        ({"audit": {"lookback": "30h"}}, f"{NS}audit.lookback: 108000s must be shorter"),
        ({"audit": {"schedule": "0 2 * * 1"}}, f"{NS}audit.lookback: 21600s is too short"),
        (
            {"audit": {"schedule": "0 2 * * 1", "lookback": "192h"}, "retentionMargin": "216h"},
            f"{NS}audit.schedule: the audit runs up to 604800s apart",
        ),
        ({"audit": {"interval": "5m"}}, f"{NS}audit.interval: unknown key"),
        (
            {"alerts": {"notificationChannels": ["123456"]}},
            f"{NS}alerts.notificationChannels[0]: '123456' is not projects/",
        ),
        ({"alerts": {"emails": ["ops"]}}, f"{NS}alerts.emails[0]: 'ops' is not an e-mail"),
    ],
)
def test_bad_audit_settings_are_rejected_naming_the_key(
    extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(minimal(**extra))

    assert str(caught.value).startswith(message), str(caught.value)


# --- monitoring -----------------------------------------------------------------------------


def test_every_alert_watches_a_log_metric_of_the_handlers_lines(run) -> None:
    resources = run()
    (function,) = [r for r in resources if r.type == FUNCTION]
    metrics = {r.inputs["name"]: r for r in resources if r.type == METRIC}
    policies = {r.inputs["displayName"]: r for r in resources if r.type == POLICY}

    assert set(metrics) == {
        "dedup-runs",
        "dedup-findings",
        "dedup-attempts",
        "dedup-latency",
        "dedup-outlived-deadline",
        "dedup-audits",
        "dedup-start-lag",
    }
    for metric in metrics.values():
        # Only this stack's function: its Cloud Run service carries the function's name.
        assert metric.inputs["filter"].startswith(
            'resource.type="cloud_run_revision" AND resource.labels.service_name='
            f'"{function.inputs["name"]}"'
        )
    assert set(policies) == {
        "dedup: Scheduled run failed for good",
        "dedup: Run ledger unavailable",
        "dedup: Scheduled run missed",
        "dedup: Run audit stopped",
    }
    for policy in policies.values():
        for condition in conditions(policy):
            watched = [
                name
                for name in metrics
                if f'metric.type="logging.googleapis.com/user/{name}"'
                in condition_filter(condition)
            ]
            assert len(watched) == 1, condition["displayName"]
            # The policy is created after the metric it names.
            assert metrics[watched[0]].urn in policy.dependencies
    failed = [
        condition_filter(c) for c in conditions(policies["dedup: Scheduled run failed for good"])
    ]
    assert any('outcome="failed_terminal"' in f and "user/dedup-runs" in f for f in failed)
    assert any('"run_failed"' in f and "user/dedup-findings" in f for f in failed)
    missed = condition_filter(conditions(policies["dedup: Scheduled run missed"])[0])
    assert all(f'"{kind}"' in missed for kind in ("run_missed", "run_stale", "run_released"))
    ledger = conditions(policies["dedup: Run ledger unavailable"])[0]["conditionThreshold"]
    assert '"store_unavailable"' in ledger["filter"]
    # More than one ledger error in the window (test_the_ledger_alert_pages_on_errors_...).
    assert (ledger["duration"], ledger["thresholdValue"]) == ("0s", 1)
    absent = conditions(policies["dedup: Run audit stopped"])[0]["conditionAbsent"]
    assert "user/dedup-audits" in absent["filter"]
    # Every 30 minutes, a 600s attempt deadline, 5 minutes of slack.
    assert absent["duration"] == f"{1800 + 600 + 300}s"


def test_metrics_extract_the_fields_the_handler_logs(run) -> None:
    metrics = {r.inputs["name"]: r.inputs for r in run() if r.type == METRIC}

    assert metrics["dedup-runs"]["labelExtractors"] == {
        "outcome": "EXTRACT(jsonPayload.outcome)",
        "job": "EXTRACT(jsonPayload.job)",
    }
    assert metrics["dedup-findings"]["labelExtractors"]["kind"] == "EXTRACT(jsonPayload.outcome)"
    assert metrics["dedup-attempts"]["valueExtractor"] == "EXTRACT(jsonPayload.attempts)"
    assert metrics["dedup-latency"]["valueExtractor"] == "EXTRACT(jsonPayload.duration_ms)"
    assert metrics["dedup-latency"]["metricDescriptor"]["valueType"] == "DISTRIBUTION"
    assert '"audit_summary"' in metrics["dedup-audits"]["filter"]
    # The final line of a run past its attempt deadline (runledger.delivery.deadline).
    outlived = metrics["dedup-outlived-deadline"]
    assert outlived["filter"].endswith(" AND jsonPayload.outlived_attempt_deadline_s>0")
    assert outlived["labelExtractors"] == {"job": "EXTRACT(jsonPayload.job)"}


def test_alerts_notify_the_configured_channels_and_emails(run) -> None:
    resources = run(alerts={"notificationChannels": [CHANNEL_ID], "emails": ["ops@example.com"]})

    (channel,) = [r for r in resources if r.type == CHANNEL]
    assert channel.inputs["type"] == "email"
    assert channel.inputs["labels"] == {"email_address": "ops@example.com"}
    for policy in (r for r in resources if r.type == POLICY):
        assert CHANNEL_ID in policy.inputs["notificationChannels"]
        assert channel.urn in policy.property_dependencies["notificationChannels"]


def test_without_channels_the_alerts_still_exist(run) -> None:
    resources = run()

    assert not [r for r in resources if r.type == CHANNEL]
    policies = [r for r in resources if r.type == POLICY]
    assert len(policies) == 4
    assert all("notificationChannels" not in p.inputs for p in policies)


def test_every_alert_links_to_its_runbook_section(run) -> None:
    # The anchors are docs/runbook.md's headings "Alert: <title>" as GitHub slugs them.
    sections = {
        "dedup: Scheduled run failed for good": "alert-scheduled-run-failed-for-good",
        "dedup: Scheduled run missed": "alert-scheduled-run-missed",
        "dedup: Run ledger unavailable": "alert-run-ledger-unavailable",
        "dedup: Run audit stopped": "alert-run-audit-stopped",
    }
    policies = {r.inputs["displayName"]: r for r in run() if r.type == POLICY}

    assert set(policies) == set(sections)
    for title, anchor in sections.items():
        documentation = policies[title].inputs["documentation"]
        assert documentation["mimeType"] == "text/markdown"
        link = f"docs/runbook.md#{anchor}"
        assert documentation["content"].endswith(f"\n\nRunbook: [{link}]({link})")


def test_the_dashboard_is_built_from_the_metric_resources_it_charts(run) -> None:
    resources = run()
    (dashboard,) = [r for r in resources if r.type == DASHBOARD]
    metrics = {r.urn for r in resources if r.type == METRIC}

    assert set(dashboard.property_dependencies["dashboardJson"]) == metrics


def test_the_dashboard_charts_runs_attempts_and_latency(run) -> None:
    (dashboard,) = [r for r in run() if r.type == DASHBOARD]
    layout = json.loads(dashboard.inputs["dashboardJson"])

    charts = {
        tile["widget"]["title"]: tile["widget"]["xyChart"]["dataSets"][0]["timeSeriesQuery"][
            "timeSeriesFilter"
        ]
        for tile in layout["mosaicLayout"]["tiles"]
    }
    runs = charts["Runs by outcome and job"]
    assert "user/dedup-runs" in runs["filter"]
    assert runs["aggregation"]["groupByFields"] == ["metric.label.outcome", "metric.label.job"]
    assert "user/dedup-attempts" in charts["Attempts per run (99th percentile), by job"]["filter"]
    assert (
        "user/dedup-latency" in charts["Handler latency in ms (99th percentile), by job"]["filter"]
    )
    outlived = charts["Runs past their attempt deadline (Scheduler gave up on the attempt), by job"]
    assert "user/dedup-outlived-deadline" in outlived["filter"]
    assert outlived["aggregation"]["groupByFields"] == ["metric.label.job"]
    lag = charts["Start lag in s (99th percentile): schedule time to claim, by job"]
    assert "user/dedup-start-lag" in lag["filter"]
    assert lag["aggregation"]["crossSeriesReducer"] == "REDUCE_PERCENTILE_99"


def test_start_lag_is_a_distribution_of_the_field_each_claim_logs(run, capsys) -> None:
    metrics = {r.inputs["name"]: r.inputs for r in run() if r.type == METRIC}
    lag = metrics["dedup-start-lag"]

    assert lag["valueExtractor"] == f"EXTRACT(jsonPayload.{facts.START_LAG_FIELD})"
    assert lag["metricDescriptor"]["valueType"] == "DISTRIBUTION"
    assert lag["filter"].endswith(f" AND jsonPayload.{facts.START_LAG_FIELD}:*")
    # The handler's line of a claimed run carries the field the metric extracts.
    clock = FakeClock(datetime(2026, 10, 16, 12, 0, 42, tzinfo=UTC))
    deliver(make_app(MemoryRunStore(), {"nightly-report": lambda _ctx: None}, clock))
    (line,) = logged(capsys)
    assert (line["outcome"], line[facts.START_LAG_FIELD]) == ("completed", 42.0)


def test_the_start_lag_alert_pages_per_job_past_the_configured_seconds(run) -> None:
    resources = run(alerts={"startLagSeconds": 900})
    metrics = {r.inputs["name"]: r for r in resources if r.type == METRIC}
    policies = {r.inputs["displayName"]: r for r in resources if r.type == POLICY}

    late = metrics["dedup-late-starts"].inputs
    assert late["filter"].endswith(f" AND jsonPayload.{facts.START_LAG_FIELD}>900")
    assert late["labelExtractors"] == {"job": "EXTRACT(jsonPayload.job)"}
    (condition,) = conditions(policies["dedup: Run started late"])
    threshold = condition["conditionThreshold"]
    assert "user/dedup-late-starts" in threshold["filter"]
    assert threshold["thresholdValue"] == 0
    assert threshold["aggregations"][0]["groupByFields"] == ["metric.label.job"]
    assert metrics["dedup-late-starts"].urn in policies["dedup: Run started late"].dependencies
    link = "docs/runbook.md#alert-run-started-late"
    content = policies["dedup: Run started late"].inputs["documentation"]["content"]
    assert content.endswith(f"\n\nRunbook: [{link}]({link})")
    # Off by default: no counter, no policy.
    assert "dedup-late-starts" not in {r.inputs["name"] for r in run() if r.type == METRIC}


@pytest.mark.parametrize("value", [0, -5, "soon", 7 * 86400 + 1])
def test_a_bad_start_lag_threshold_names_its_key(run, value) -> None:
    with pytest.raises(ProgramFailed, match=r"alerts\.startLagSeconds: "):
        run(alerts={"startLagSeconds": value})


# --- the outcome names the alerts count are the handler's -----------------------------------


def logged(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]


def test_request_lines_carry_the_outcomes_and_fields_the_metrics_count(capsys) -> None:
    def fails(_context: object) -> None:
        raise TerminalJobError("bad input")

    app = make_app(MemoryRunStore(), {"nightly-report": fails}, FakeClock())
    deliver(app)
    (line,) = logged(capsys)

    assert line["outcome"] == facts.OUTCOME_FAILED_TERMINAL
    assert line["job"] == "nightly-report"
    assert line["attempts"] == 1
    assert line["duration_ms"] >= 0

    class Unreachable:
        def __getattr__(self, name: str) -> Callable[..., None]:
            def fail(*_args: object, **_kwargs: object) -> None:
                raise StoreUnavailable("no route to Firestore")

            return fail

    down = make_app(Unreachable(), {"nightly-report": fails}, FakeClock())  # type: ignore[arg-type]
    deliver(down)
    (line,) = logged(capsys)
    assert line["outcome"] in facts.LEDGER_UNAVAILABLE_OUTCOMES


def test_audit_lines_carry_the_outcomes_the_metrics_count() -> None:
    assert {finding.outcome for finding in Finding} == {
        *facts.MISSED_RUN_OUTCOMES,
        facts.OUTCOME_RUN_FAILED,
        *facts.JOB_FINDING_OUTCOMES,
        facts.OUTCOME_JOB_SUSPENDED,
    }
    stream = io.StringIO()
    now = datetime(2026, 10, 16, tzinfo=UTC)
    log_report(AuditReport(now, now, jobs=0, checked=0, pending=0, before_epoch=0, reads=0), stream)

    (summary,) = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert summary["outcome"] == facts.OUTCOME_AUDIT_SUMMARY


# --- the first `up`, alerts that fire again, a dashboard without diffs -----------------------


SLEEP = "time:index/sleep:Sleep"


def ancestors(resources: list[CapturedResource], start: CapturedResource) -> set[str]:
    """URNs `start` depends on, directly or through other resources."""
    by_urn = {r.urn: r for r in resources}
    seen: set[str] = set()
    todo = list(start.dependencies)
    while todo:
        urn = todo.pop()
        if urn not in seen:
            seen.add(urn)
            todo.extend(by_urn[urn].dependencies if urn in by_urn else ())
    return seen


def test_every_alert_policy_waits_for_the_metrics_its_filters_name(run) -> None:
    # Cloud Monitoring answers 404 "Cannot find metric(s)" to a policy on a log-based
    # metric created moments ago ("could take up to 10 minutes"): the policies wait.
    resources = run()
    metrics = {r.inputs["name"]: r for r in resources if r.type == METRIC}
    waits = {r.urn: r for r in resources if r.type == SLEEP}
    policies = [r for r in resources if r.type == POLICY]

    assert len(policies) == 4
    for policy in policies:
        before = ancestors(resources, policy)
        named = {
            name
            for condition in conditions(policy)
            for name in metrics
            if f'user/{name}"' in condition_filter(condition)
        }
        assert named, policy.inputs["displayName"]
        metric_waits = [
            waits[urn]
            for urn in before & set(waits)
            if {metrics[name].urn for name in named} <= set(waits[urn].dependencies)
        ]
        assert metric_waits, policy.inputs["displayName"]
        for wait in metric_waits:
            assert wait.inputs["createDuration"] == "600s"
    (wait,) = [w for w in waits.values() if w.name == "dedup-metrics-wait"]
    # Triggered by the metrics' ids: only an `up` that adds or replaces a metric waits.
    assert len(wait.inputs["triggers"]) == len(metrics)


def test_sparse_metric_conditions_evaluate_missing_data_and_close(run) -> None:
    # The counters have points only when a line matched: between failures there is no
    # data, and an incident left open swallows the next failure's notification.
    policies = [r for r in run() if r.type == POLICY]

    thresholds = 0
    for policy in policies:
        kinds = [c.get("conditionThreshold") for c in conditions(policy)]
        if any(kind is not None for kind in kinds):
            assert policy.inputs["alertStrategy"]["autoClose"] == "1800s"
        for kind in kinds:
            if kind is not None:
                thresholds += 1
                assert kind["evaluationMissingData"] == "EVALUATION_MISSING_DATA_INACTIVE"
                assert "user/dedup-" in kind["filter"]
    assert thresholds == 4
    # The absence condition closes when the audit's line comes back, not on a timer.
    (stopped,) = [p for p in policies if p.inputs["displayName"] == "dedup: Run audit stopped"]
    assert "alertStrategy" not in stopped.inputs


def test_the_ledger_alert_pages_on_errors_minutes_apart(run) -> None:
    # A nightly job's retries are minutes apart: the condition must not need errors in
    # every minute of a window, only more than one error within it.
    policies = {
        r.inputs["displayName"]: r
        for r in run(audit={"schedule": "*/15 * * * *"})
        if r.type == POLICY
    }
    (condition,) = conditions(policies["dedup: Run ledger unavailable"])
    threshold = condition["conditionThreshold"]

    assert threshold["duration"] == "0s"
    assert threshold["thresholdValue"] == 1
    (aggregation,) = threshold["aggregations"]
    # Two audits every 15 minutes fall in it, whatever the jobs do.
    assert aggregation["alignmentPeriod"] == "1800s"
    assert aggregation["perSeriesAligner"] == "ALIGN_SUM"
    slower = {r.inputs["displayName"]: r for r in run() if r.type == POLICY}
    (condition,) = conditions(slower["dedup: Run ledger unavailable"])
    # The default audit runs every 30 minutes: the window is two of its intervals.
    assert condition["conditionThreshold"]["aggregations"][0]["alignmentPeriod"] == "3600s"


def test_the_dashboard_json_has_no_zero_or_empty_field(run) -> None:
    # The API drops zero values and empty lists from what it returns; sending them makes
    # every preview show a diff on an unchanged dashboard.
    (dashboard,) = [r for r in run() if r.type == DASHBOARD]
    layout = json.loads(dashboard.inputs["dashboardJson"])

    def defaults(value: Any, path: str) -> list[str]:
        if isinstance(value, dict):
            return [p for key, item in value.items() for p in defaults(item, f"{path}.{key}")]
        if isinstance(value, list):
            found = [path] if not value else []
            return found + [
                p for i, item in enumerate(value) for p in defaults(item, f"{path}[{i}]")
            ]
        return [path] if value in (0, "", None, False) else []

    assert defaults(layout, "") == []
    tiles = layout["mosaicLayout"]["tiles"]
    assert len(tiles) == 7
    assert "xPos" not in tiles[0] and "yPos" not in tiles[0]
    assert (tiles[3]["xPos"], tiles[3]["yPos"]) == (24, 16)
    audits = tiles[5]["widget"]["xyChart"]["dataSets"][0]["timeSeriesQuery"]["timeSeriesFilter"]
    assert "groupByFields" not in audits["aggregation"]


def test_distinct_addresses_get_distinct_channels(run) -> None:
    resources = run(alerts={"emails": ["a.b@example.com", "a-b@example.com", "ops@example.com"]})
    channels = {r.inputs["labels"]["email_address"]: r for r in resources if r.type == CHANNEL}

    assert len({channel.urn for channel in channels.values()}) == 3
    for policy in (r for r in resources if r.type == POLICY):
        assert len(policy.inputs["notificationChannels"]) == 3
    # A channel named before the hash suffix keeps its resource, unless two addresses
    # shared that old name (an alias may stand for one resource only).
    ops = channels["ops@example.com"]
    assert ops.urn.endswith(
        f"::dedup-alert-email-ops-example-com-{sha256(b'ops@example.com').hexdigest()[:10]}"
    )
    assert [alias.rsplit("::", 1)[1] for alias in ops.aliases] == [
        "dedup-alert-email-ops-example-com"
    ]
    assert ops.aliases[0].rsplit("::", 1)[0] == ops.urn.rsplit("::", 1)[0]
    assert channels["a.b@example.com"].aliases == ()
    assert channels["a-b@example.com"].aliases == ()


def test_the_audit_job_is_named_from_the_prefix_and_the_handler_told(run, multi_job_config) -> None:
    resources = run(namePrefix="nightly")
    env = environment(resources)
    audit = audit_settings(env, Settings.from_env(env))

    assert audit.job == "nightly-audit"
    assert "nightly-audit" in jobs_by_name(resources)
    assert AUDIT_JOB_ID not in jobs_by_name(resources)
    stopped = [r for r in resources if r.type == POLICY and "conditionAbsent" in str(r.inputs)]
    assert "nightly-audit" in stopped[0].inputs["documentation"]["content"]


def test_a_job_named_like_the_stacks_audit_job_is_rejected(run, multi_job_config) -> None:
    jobs = multi_job_config[f"{NS}jobs"]
    jobs[0]["id"] = "dedup-audit"
    with pytest.raises(ProgramFailed, match=f"{NS}jobs\\[0\\].id: 'dedup-audit' is reserved"):
        run(jobs=jobs)


def test_the_example_plan_grants_no_predefined_scheduler_role() -> None:
    # `make plan` of the repository's example stack: the audit's listing is a custom role.
    result = run_module("scheduler_dedup.offline.plan", timeout_s=120)

    assert result.returncode == 0, result.stderr
    assert "roles/cloudscheduler." not in result.stdout
    assert "permissions: [cloudscheduler.jobs.list]" in result.stdout


def test_a_look_back_must_span_the_hour_a_jobs_zone_repeats() -> None:
    """A repeated wall time settles an hour after its record's first instant: with a
    retention short enough for TTL to matter, a shorter look-back judged it after its
    record was gone (the simulator's seed 39, `ttl_deletion`)."""
    job = {"id": "a", "schedule": "0 2 * * *"}
    audit = {"lookback": "90m"}
    parse_config(minimal(jobs=[job | {"timeZone": "UTC"}], audit=audit))
    with pytest.raises(ConfigError) as caught:
        parse_config(minimal(jobs=[job | {"timeZone": "Europe/Berlin"}], audit=audit))
    assert "is too short to judge every run once" in str(caught.value)
    assert "retry window + lease + a repeated hour" in str(caught.value)
