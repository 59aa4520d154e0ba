"""Two stacks of one project, each with its own `namePrefix`: nothing Google names collides.

Cloud Scheduler job ids are unique per project and location, and service accounts,
log-based metrics, buckets and the rest per project, so a second stack beside the
first must not create a single name the first already has. Both stacks run the real
program under mocks on one copy of the project (see conftest.py) and then go through
the policy pack as `make policy-check` runs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runledger.schedules import AUDIT_JOB_VARIABLE
from scheduler_dedup.offline.analyzer import evaluate
from scheduler_dedup.offline.mockrun import CapturedResource
from scheduler_dedup.offline.pack_loader import load_pack
from scheduler_dedup.offline.stack_resources import run_stack
from tests.infra.conftest import SharedRuns, write_stack
from tests.stacks import PACK_DIR

PROJECT = "dedup-shared-project"
REGION = "europe-west3"
NS = "scheduler-dedup:"


def stack_config(prefix: str, database: str, jobs: list[str], email: str) -> dict[str, Any]:
    return {
        "gcp:project": PROJECT,
        "gcp:region": REGION,
        f"{NS}namePrefix": prefix,
        f"{NS}database": {"name": database},
        f"{NS}alerts": {"emails": [email]},
        f"{NS}jobs": [
            {"id": job, "schedule": f"{index * 7} 3 * * *", "retry": {"retryCount": 2}}
            for index, job in enumerate(jobs)
        ],
    }


# The configured job ids are used verbatim (the handler dispatches on them), so two
# stacks in one region take different ones; everything else differs by the prefix alone.
STACKS = {
    "blue": stack_config("blue", "blue-ledger", ["nightly-report", "hourly-sync"], "ops@x.com"),
    "green": stack_config("green", "green-ledger", ["invoice-export", "reindex"], "ops@x.com"),
}

# What Google names per project (or per project and location), by resource type.
GOOGLE_NAMES = {
    "gcp:cloudscheduler/job:Job": ("name",),
    "gcp:cloudfunctionsv2/function:Function": ("name",),
    "gcp:serviceaccount/account:Account": ("accountId",),
    "gcp:projects/iAMCustomRole:IAMCustomRole": ("roleId",),
    "gcp:storage/bucket:Bucket": ("name",),
    "gcp:artifactregistry/repository:Repository": ("repositoryId",),
    "gcp:firestore/database:Database": ("name",),
    "gcp:logging/metric:Metric": ("name",),
    "gcp:monitoring/alertPolicy:AlertPolicy": ("displayName",),
    "gcp:monitoring/notificationChannel:NotificationChannel": ("displayName",),
    "gcp:monitoring/dashboard:Dashboard": ("dashboardJson",),
}


@pytest.fixture
def two_stacks(shared_run: SharedRuns) -> dict[str, list[CapturedResource]]:
    return {stack: shared_run(config, stack) for stack, config in STACKS.items()}


def google_names(resources: list[CapturedResource]) -> dict[str, set[str]]:
    """Per resource type, the names Google keeps unique in the project."""
    names: dict[str, set[str]] = {}
    for resource in resources:
        for key in GOOGLE_NAMES.get(resource.type, ()):
            value = resource.inputs[key]
            if resource.type == "gcp:monitoring/dashboard:Dashboard":
                value = value.split('"mosaicLayout"')[0]  # its displayName
            names.setdefault(resource.type, set()).add(value)
    return names


def test_two_stacks_of_one_project_share_no_name(two_stacks) -> None:
    blue, green = (google_names(two_stacks[stack]) for stack in STACKS)

    # Every kind of resource is there in both, and none of its names is in both.
    assert set(blue) == set(green) == set(GOOGLE_NAMES)
    for type_ in GOOGLE_NAMES:
        assert blue[type_], type_
        assert not blue[type_] & green[type_], (type_, blue[type_] & green[type_])
    assert "blue-audit" in blue["gcp:cloudscheduler/job:Job"]
    assert "green-audit" in green["gcp:cloudscheduler/job:Job"]


def test_each_handler_serves_its_own_stacks_audit_job(two_stacks) -> None:
    for stack, resources in two_stacks.items():
        (function,) = [r for r in resources if r.type == "gcp:cloudfunctionsv2/function:Function"]
        jobs = {r.inputs["name"] for r in resources if r.type == "gcp:cloudscheduler/job:Job"}
        audit_job = function.inputs["serviceConfig"]["environmentVariables"][AUDIT_JOB_VARIABLE]
        assert audit_job == f"{stack}-audit"
        assert audit_job in jobs


def test_both_stacks_pass_the_policy_pack(project_copy: Path) -> None:
    pack = load_pack(PACK_DIR)
    for stack, config in STACKS.items():
        write_stack(project_copy, stack, config)
        resources = run_stack(project_copy, stack, None, [])
        diagnostics = evaluate(
            pack, resources, {}, stack=stack, project="scheduler-dedup", dry_run=True
        )
        assert diagnostics == [], (stack, [(d.policy, d.message) for d in diagnostics])
