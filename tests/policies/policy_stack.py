"""A compliant stack for the policy pack, written by hand, and helpers to break it.

It mirrors what the example program registers (wire form: camelCase,
floats, inputs vs. outputs, property dependencies), but is spelled out here so
each rule test can break exactly one thing and know the rest is compliant.
Every evaluation goes through `scheduler_dedup.offline.analyzer.evaluate`, i.e. the SDK's
own analyzer servicer, so levels, config and unknowns behave as under the CLI.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from scheduler_dedup.offline.stack_resources import StackResource

PROJECT = "demo-proj"
REGION = "europe-west1"
PREFIX = "urn:pulumi:test::demo::scheduler-dedup:index:DedupSchedule$"
RUN_URL = "https://demo-handler-123456789012.europe-west1.run.app"
RUN_SERVICE_URL = "https://other-service-123456789012.europe-west1.run.app"
FN_URL = f"https://{REGION}-{PROJECT}.cloudfunctions.net/demo-handler"
ROLE_NAME = f"projects/{PROJECT}/roles/demo_ledger_rw"
SCHEDULER_ROLE_NAME = f"projects/{PROJECT}/roles/demo_scheduler_read"


def _sa_email(account_id: str) -> str:
    return f"{account_id}@{PROJECT}.iam.gserviceaccount.com"


RUNTIME_SA = _sa_email("demo-runtime")
INVOKER_SA = _sa_email("demo-invoker")
BUILD_SA = _sa_email("demo-build")


def urn(type_: str, name: str) -> str:
    return f"{PREFIX}{type_}::{name}"


def resource(
    type_: str,
    name: str,
    inputs: dict[str, Any],
    computed: dict[str, Any] | None = None,
    deps: Mapping[str, list[str]] | None = None,
) -> StackResource:
    deps = dict(deps or {})
    return StackResource(
        type=type_,
        name=name,
        urn=urn(type_, name),
        inputs=inputs,
        outputs={**copy.deepcopy(inputs), **(computed or {})},
        dependencies=sorted({u for urns in deps.values() for u in urns}),
        property_dependencies=deps,
    )


def _account(name: str, account_id: str) -> StackResource:
    email = _sa_email(account_id)
    return resource(
        "gcp:serviceaccount/account:Account",
        name,
        {"project": PROJECT, "accountId": account_id, "displayName": account_id},
        {"email": email, "member": f"serviceAccount:{email}", "name": f"projects/x/{email}"},
    )


def _job(
    name: str, schedule: str, deadline: str, retry: dict[str, Any], headers: tuple[str, str]
) -> StackResource:
    function_urn = urn("gcp:cloudfunctionsv2/function:Function", "demo-handler")
    invoker_urn = urn("gcp:serviceaccount/account:Account", "demo-invoker-sa")
    return resource(
        "gcp:cloudscheduler/job:Job",
        name,
        {
            "project": PROJECT,
            "region": REGION,
            "name": name,
            "schedule": schedule,
            "timeZone": "UTC",
            "attemptDeadline": deadline,
            "retryConfig": retry,
            "httpTarget": {
                "uri": RUN_URL,
                "httpMethod": "POST",
                "headers": {
                    headers[0]: PROJECT,
                    headers[1]: REGION,
                    "Content-Type": "application/json",
                },
                "oidcToken": {"serviceAccountEmail": INVOKER_SA, "audience": RUN_URL},
            },
        },
        {"state": "ENABLED"},
        {"httpTarget": [function_urn, invoker_urn]},
    )


def compliant_stack(
    project_header: str = "X-Dedup-Project", region_header: str = "X-Dedup-Region"
) -> list[StackResource]:
    """A stack every rule accepts: one function handler, two jobs, ledger, IAM.

    The header names are the stack's (`scheduler-dedup:projectHeader`/`regionHeader`):
    the handler is told to read them and the jobs send them.
    """
    headers = (project_header, region_header)
    role_type = "gcp:projects/iAMCustomRole:IAMCustomRole"
    member_type = "gcp:projects/iAMMember:IAMMember"
    runtime_urn = urn("gcp:serviceaccount/account:Account", "demo-runtime-sa")
    build_urn = urn("gcp:serviceaccount/account:Account", "demo-build-sa")
    env = {
        "DEDUP_COLLECTION": "scheduler_runs",
        "DEDUP_DATABASE": "scheduler-ledger",
        "DEDUP_LEASE_SECONDS": "960",
        "DEDUP_RETENTION_SECONDS": "90420",
        "DEDUP_PROJECT_HEADER": project_header,
        "DEDUP_REGION_HEADER": region_header,
        "DEDUP_ALLOWED_PROJECTS": PROJECT,
        "DEDUP_ALLOWED_REGIONS": REGION,
        "DEDUP_ALLOWED_INVOKERS": INVOKER_SA,
    }
    return [
        _account("demo-runtime-sa", "demo-runtime"),
        _account("demo-invoker-sa", "demo-invoker"),
        _account("demo-build-sa", "demo-build"),
        resource(
            role_type,
            "demo-ledger-role",
            {
                "project": PROJECT,
                "roleId": "demo_ledger_rw",
                "title": "ledger",
                "permissions": [
                    "datastore.entities.create",
                    "datastore.entities.get",
                    "datastore.entities.update",
                ],
            },
            {"name": ROLE_NAME},
        ),
        resource(
            member_type,
            "demo-runtime-ledger-access",
            {
                "project": PROJECT,
                "role": ROLE_NAME,
                "member": f"serviceAccount:{RUNTIME_SA}",
                "condition": {"title": "ledger db", "expression": "resource.name == 'x'"},
            },
            deps={"role": [urn(role_type, "demo-ledger-role")], "member": [runtime_urn]},
        ),
        resource(
            role_type,
            "demo-scheduler-read-role",
            {
                "project": PROJECT,
                "roleId": "demo_scheduler_read",
                "title": "list Scheduler jobs",
                "permissions": ["cloudscheduler.jobs.list"],
            },
            {"name": SCHEDULER_ROLE_NAME},
        ),
        resource(
            member_type,
            "demo-scheduler-read",
            {
                "project": PROJECT,
                "role": SCHEDULER_ROLE_NAME,
                "member": f"serviceAccount:{RUNTIME_SA}",
            },
            deps={"role": [urn(role_type, "demo-scheduler-read-role")], "member": [runtime_urn]},
        ),
        resource(
            member_type,
            "demo-build-log-writer",
            {
                "project": PROJECT,
                "role": "roles/logging.logWriter",
                "member": f"serviceAccount:{BUILD_SA}",
            },
            deps={"member": [build_urn]},
        ),
        resource(
            member_type,
            "demo-build-staged-source-reader",
            {
                "project": PROJECT,
                "role": "roles/storage.objectAdmin",
                "member": f"serviceAccount:{BUILD_SA}",
                "condition": {"title": "staging", "expression": "resource.name.startsWith('x')"},
            },
            deps={"member": [build_urn]},
        ),
        resource(
            "gcp:firestore/database:Database",
            "demo-ledger-db",
            {"project": PROJECT, "name": "scheduler-ledger", "type": "FIRESTORE_NATIVE"},
        ),
        resource(
            "gcp:firestore/field:Field",
            "demo-ledger-ttl",
            {
                "project": PROJECT,
                "database": "scheduler-ledger",
                "collection": "scheduler_runs",
                "field": "expire_at",
                "ttlConfig": {},
                "indexConfig": {},
            },
        ),
        resource(
            "gcp:cloudfunctionsv2/function:Function",
            "demo-handler",
            {
                "project": PROJECT,
                "location": REGION,
                "name": "demo-handler",
                "serviceConfig": {
                    "serviceAccountEmail": RUNTIME_SA,
                    "timeoutSeconds": 900.0,
                    "environmentVariables": env,
                    "ingressSettings": "ALLOW_INTERNAL_ONLY",
                },
            },
            {"url": FN_URL},
            deps={"serviceConfig": [runtime_urn]},
        ),
        resource(
            "gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
            "demo-invoker-run",
            {
                "project": PROJECT,
                "location": REGION,
                "name": "demo-handler",
                "role": "roles/run.invoker",
                "member": f"serviceAccount:{INVOKER_SA}",
            },
        ),
        _job(
            "nightly-report",
            "30 2 * * *",
            "900s",
            {
                "retryCount": 3.0,
                "maxRetryDuration": "3600s",
                "minBackoffDuration": "60s",
                "maxBackoffDuration": "600s",
                "maxDoublings": 2.0,
            },
            headers,
        ),
        _job(
            "hourly-sync",
            "5 * * * *",
            "120s",
            {"retryCount": 5.0, "minBackoffDuration": "10s", "maxBackoffDuration": "300s"},
            headers,
        ),
        *alerting(),
    ]


def _log_metric(name: str, outcome_filter: str) -> StackResource:
    return resource(
        "gcp:logging/metric:Metric",
        name,
        {
            "project": PROJECT,
            "name": name,
            "filter": 'resource.type="cloud_run_revision" AND '
            f'resource.labels.service_name="demo-handler"{outcome_filter}',
        },
    )


def _alert(name: str, metric: str, selector: str) -> StackResource:
    metric_urn = urn("gcp:logging/metric:Metric", metric)
    return resource(
        "gcp:monitoring/alertPolicy:AlertPolicy",
        name,
        {
            "project": PROJECT,
            "displayName": name,
            "combiner": "OR",
            "conditions": [
                {
                    "displayName": name,
                    "conditionThreshold": {
                        "filter": 'resource.type="cloud_run_revision" AND '
                        f'metric.type="logging.googleapis.com/user/{metric}" AND {selector}',
                        "comparison": "COMPARISON_GT",
                        "thresholdValue": 0.0,
                        "duration": "0s",
                    },
                }
            ],
        },
        deps={"conditions": [metric_urn]},
    )


def alerting() -> list[StackResource]:
    """What the program's RunMonitoring registers for failed and missed runs, in brief."""
    return [
        _log_metric("demo-runs", " AND jsonPayload.duration_ms>=0"),
        _log_metric(
            "demo-findings",
            ' AND jsonPayload.outcome=("run_missed" OR "run_stale" OR "run_failed" OR '
            '"run_released")',
        ),
        _alert("demo-alert-failed", "demo-runs", 'metric.label.outcome="failed_terminal"'),
        _alert(
            "demo-alert-missed",
            "demo-findings",
            'metric.label.kind=one_of("run_missed","run_stale","run_released")',
        ),
    ]


def find(resources: list[StackResource], name: str) -> StackResource:
    """The resource called `name` (edit both `.inputs` and `.outputs` to change it)."""
    return next(r for r in resources if r.name == name)


def edit(resources: list[StackResource], name: str, change: Callable[[dict], None]) -> None:
    """Applies `change` to a resource's inputs and outputs alike (as a real edit would)."""
    resource = find(resources, name)
    change(resource.inputs)
    change(resource.outputs)


REPO_ROOT = Path(__file__).resolve().parents[2]


def with_function_uri(resources: list[StackResource]) -> list[StackResource]:
    """The function's computed Cloud Run URI, as the provider reports it after create."""
    for resource in resources:
        if resource.type == "gcp:cloudfunctionsv2/function:Function":
            resource.outputs["serviceConfig"]["uri"] = RUN_URL
    return resources


RUNTIME_MEMBER = f"serviceAccount:demo-runtime@{PROJECT}.iam.gserviceaccount.com"


def project_grant(name: str, role: str, member: str = RUNTIME_MEMBER) -> StackResource:
    return resource(
        "gcp:projects/iAMMember:IAMMember",
        name,
        {"project": PROJECT, "role": role, "member": member},
    )
