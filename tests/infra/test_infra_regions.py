"""A two-region stack under Pulumi's mocks: a function and the jobs in each region, one ledger.

The first region's resources keep the names (and URNs) a one-region stack gives
them, so adding a region to a deployed stack only adds resources.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pulumi_policy import EnforcementLevel

from scheduler_dedup.offline.analyzer import evaluate
from scheduler_dedup.offline.mockrun import CapturedResource, ProgramResources
from scheduler_dedup.offline.pack_loader import LoadedPack, load_pack
from scheduler_dedup.offline.plan import render_plan
from scheduler_dedup.offline.policy_config import parse_policy_config
from scheduler_dedup.offline.stack_resources import stack_resource
from tests.infra.conftest import MULTI_JOB_CONFIG, SharedRuns
from tests.stacks import PACK_DIR

FUNCTION = "gcp:cloudfunctionsv2/function:Function"
JOB = "gcp:cloudscheduler/job:Job"
DATABASE = "gcp:firestore/database:Database"
FIRST, SECOND = "europe-west3", "europe-west4"


def on_eur3() -> dict[str, Any]:
    """The multi-job stack in one region, its ledger already in a multi-region location."""
    config = copy.deepcopy(MULTI_JOB_CONFIG)
    config["scheduler-dedup:database"] = {**config["scheduler-dedup:database"], "location": "eur3"}
    return config


def two_regions() -> dict[str, Any]:
    return {**on_eur3(), "scheduler-dedup:regions": [FIRST, SECOND]}


@pytest.fixture(scope="module")
def one_region(shared_run: SharedRuns) -> ProgramResources:
    return shared_run(on_eur3())


@pytest.fixture(scope="module")
def both(shared_run: SharedRuns) -> ProgramResources:
    return shared_run(two_regions())


def of_type(resources: list[CapturedResource], type_: str) -> list[CapturedResource]:
    return [resource for resource in resources if resource.type == type_]


def test_each_region_has_a_function_with_its_own_environment(both) -> None:
    functions = {f.inputs["location"]: f for f in of_type(both, FUNCTION)}

    assert set(functions) == {FIRST, SECOND}
    assert {f.inputs["name"] for f in functions.values()} == {"dedup-handler"}
    assert functions[SECOND].name == f"dedup-handler-{SECOND}"
    for region, function in functions.items():
        env = function.inputs["serviceConfig"]["environmentVariables"]
        assert env["DEDUP_ALLOWED_REGIONS"] == region
        assert (env["DEDUP_KEY_REGION"], env["DEDUP_REGIONS"]) == (FIRST, f"{FIRST},{SECOND}")
        repository = function.inputs["buildConfig"]["dockerRepository"]
        assert f"/locations/{region}/" in repository


def test_each_regions_jobs_call_that_regions_function_with_its_region_header(both) -> None:
    urls = {
        f.inputs["location"]: f.outputs["serviceConfig"]["uri"] for f in of_type(both, FUNCTION)
    }
    jobs = of_type(both, JOB)

    by_region: dict[str, set[str]] = {}
    for job in jobs:
        region = job.inputs["region"]
        by_region.setdefault(region, set()).add(job.inputs["name"])
        target = job.inputs["httpTarget"]
        assert target["uri"] == urls[region]
        assert target["headers"]["X-Dedup-Region"] == region
        assert target["headers"]["X-Dedup-Project"] == "dedup-test-project"
    expected = {"nightly-report", "hourly-sync", "invoice-export", "dedup-audit"}
    assert by_region == {FIRST: expected, SECOND: expected}
    assert (of_type(both, DATABASE)[0].inputs["locationId"], len(of_type(both, DATABASE))) == (
        "eur3",
        1,
    )
    assert set(both.stack_outputs["regionServiceUrls"]) == {FIRST, SECOND}


def test_adding_a_region_keeps_every_first_region_resource_and_only_adds(one_region, both) -> None:
    before = {resource.urn: resource for resource in one_region}
    after = {resource.urn: resource for resource in both}

    assert set(before) <= set(after)
    added = [after[urn] for urn in set(after) - set(before)]
    # Each added region's resources, and the count of the regions' duplicates.
    assert added and all(
        resource.name.endswith(f"-{SECOND}") or resource.name == "dedup-metric-cross-region"
        for resource in added
    )
    for urn, resource in before.items():
        if resource.type in (JOB, DATABASE):
            assert after[urn].inputs == resource.inputs, resource.name
    assert "regionServiceUrls" not in one_region.stack_outputs


@pytest.fixture(scope="module")
def pack() -> LoadedPack:
    return load_pack(PACK_DIR)


def mandatory(pack: LoadedPack, resources: list[CapturedResource]) -> list[tuple[str, str]]:
    found = evaluate(
        pack, [stack_resource(r) for r in resources], parse_policy_config(""), stack="test"
    )
    return [(d.policy, d.message) for d in found if d.level is EnforcementLevel.MANDATORY]


def test_the_policy_pack_passes_the_two_region_stack_and_refuses_a_regional_ledger(
    pack, both
) -> None:
    assert mandatory(pack, both) == []
    regional = copy.deepcopy(both)
    (database,) = of_type(regional, DATABASE)
    database.inputs["locationId"] = database.outputs["locationId"] = FIRST

    (refused,) = mandatory(pack, regional)

    assert refused[0] == "ledger-multi-region"
    assert (
        refused[1]
        .splitlines()[1]
        .startswith(
            f"Firestore database 'run-ledger' holds the ledger of a schedule run in 2 regions "
            f"({FIRST}, {SECOND}) but is in the one region '{FIRST}'"
        )
    )


def test_the_plan_shows_both_functions_and_both_regions_jobs(both) -> None:
    text = render_plan(both, both.stack_outputs)

    for name in ("dedup-handler", f"dedup-handler-{SECOND}", "dedup-service", "dedup-jobs"):
        assert f" {name} " in text or f" {name}\n" in text, name
    for job in ("nightly-report", "hourly-sync", "dedup-audit"):
        assert f"dedup-job-{job}" in text and f"dedup-job-{job}-{SECOND}" in text


def test_a_two_region_stack_counts_cross_region_duplicates_and_one_region_does_not(
    one_region, both
) -> None:
    metric = "gcp:logging/metric:Metric"
    (counted,) = [m for m in of_type(both, metric) if m.inputs["name"] == "dedup-cross-region"]

    assert "jsonPayload.cross_region_duplicate:*" in counted.inputs["filter"]
    assert set(counted.inputs["labelExtractors"]) == {"job", "ran_in"}
    assert "dedup-cross-region" not in {m.inputs["name"] for m in of_type(one_region, metric)}
