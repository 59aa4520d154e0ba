"""The real Pulumi program under mocks: what it creates, and that it is locked down.

Resources are captured in wire form (camelCase, numbers as floats) by
`scheduler_dedup.offline.mockrun`, so these assertions see what the engine and policies would see.
The program runs with preview off, so every `apply` runs and computed values
(emails, the service URL) are the mocks' realistic ones, never None.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import runledger
from dedup_schedule.source import handler_archive
from runledger import facts
from scheduler_dedup.offline.mockrun import (
    STACK_TYPE,
    CapturedResource,
    ProgramFailed,
    ProgramResources,
    mock_project_number,
    run_program,
)
from tests.infra.conftest import MULTI_JOB_CONFIG, copy_project, role_name, write_stack

PROJECT = "dedup-test-project"
REGION = "europe-west3"
FUNCTION = "gcp:cloudfunctionsv2/function:Function"
JOB = "gcp:cloudscheduler/job:Job"
ACCOUNT = "gcp:serviceaccount/account:Account"
COMPONENT = "scheduler-dedup:index:DedupSchedule"
CHILD_COMPONENTS = (
    "scheduler-dedup:index:RunLedger",
    "scheduler-dedup:index:HandlerService",
    "scheduler-dedup:index:ScheduledJobs",
    "scheduler-dedup:index:RunMonitoring",
)
IAM_TYPES = (
    "gcp:projects/iAMMember:IAMMember",
    "gcp:serviceaccount/iAMMember:IAMMember",
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember",
    "gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
)


@pytest.fixture(scope="module")
def multi_job_run(tmp_path_factory: pytest.TempPathFactory) -> ProgramResources:
    """One run of the program for the multi-job stack, shared by the tests that only read it.

    The program is deterministic under mocks, and one run costs seconds of CPU;
    each test gets its own deep copy (`resources`), so none can see another's edits.
    """
    project = copy_project(tmp_path_factory.mktemp("multi-job"))
    write_stack(project, "test", copy.deepcopy(MULTI_JOB_CONFIG))
    return run_program(project, "test")


@pytest.fixture
def resources(multi_job_run: ProgramResources) -> ProgramResources:
    return copy.deepcopy(multi_job_run)


def only(resources: list[CapturedResource], type_: str) -> CapturedResource:
    (match,) = [resource for resource in resources if resource.type == type_]
    return match


def named(resources: list[CapturedResource], name: str) -> CapturedResource:
    (match,) = [resource for resource in resources if resource.name == name]
    return match


def email(role: str) -> str:
    return f"dedup-{role}@{PROJECT}.iam.gserviceaccount.com"


def strings(value: Any) -> list[str]:
    """Every string anywhere inside a wire-form value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in [str(key), *strings(item)]]
    if isinstance(value, list | tuple):
        return [s for item in value for s in strings(item)]
    return []


def test_one_component_owns_every_resource_with_names_from_the_prefix(resources) -> None:
    component = only(resources, COMPONENT)
    stack = only(resources, STACK_TYPE)
    children = [only(resources, type_) for type_ in CHILD_COMPONENTS]

    assert component.parent == stack.urn
    assert {child.name for child in children} == {
        "dedup-ledger",
        "dedup-service",
        "dedup-jobs",
        "dedup-monitoring",
    }
    assert all(child.parent == component.urn for child in children)
    owners = {component.urn, *(child.urn for child in children)}
    for resource in resources:
        if resource.type != STACK_TYPE:
            assert resource.parent in owners or resource is component, resource.name
            assert resource.name.startswith("dedup-") or resource is component, resource.name


def test_resources_moved_into_child_components_keep_their_previous_urns(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    # Before the split by concern every resource was a direct child of DedupSchedule.
    # Each one a child component now owns carries an alias to that URN, so an existing
    # stack updates it in place instead of replacing it (the ledger database above all).
    jobs = multi_job_config["scheduler-dedup:jobs"]
    jobs[0]["target"] = {"workflow": f"projects/{PROJECT}/locations/{REGION}/workflows/etl"}
    jobs[1]["target"] = {"cloudRunJob": "projects/batch-jobs-prod/locations/us-east1/jobs/sync"}
    resources = run_program(make_stack(multi_job_config), "test")
    component = only(resources, COMPONENT)

    moved = {r.name for r in resources if r.custom and r.parent != component.urn}
    assert {
        "dedup-ledger-db",
        "dedup-ledger-ttl",
        "dedup-work-ttl",
        "dedup-runtime-ledger-access",
        "dedup-build-sa",
        "dedup-source-archive",
        "dedup-handler",
        "dedup-invoker-run",
        f"dedup-workflow-invoker-{PROJECT}",
        "dedup-run-job-role-batch-jobs-prod",
        "dedup-job-hourly-sync",
    } <= moved
    # Monitoring came after the split: its resources never had another parent.
    monitoring = only(resources, "scheduler-dedup:index:RunMonitoring")
    for resource in resources:
        if resource.custom and resource.parent != monitoring.urn:
            previous = (
                f"urn:pulumi:test::scheduler-dedup::{COMPONENT}${resource.type}::{resource.name}"
            )
            assert previous in (resource.urn, *resource.aliases), resource.name
    for child in CHILD_COMPONENTS:
        assert only(resources, child).aliases == ()


def test_required_apis_are_enabled_and_left_on_at_destroy(resources) -> None:
    apis = resources.of_type("gcp:projects/service:Service")

    assert {api.inputs["service"] for api in apis} >= {
        "cloudfunctions.googleapis.com",
        "cloudbuild.googleapis.com",
        "run.googleapis.com",
        "cloudscheduler.googleapis.com",
        "firestore.googleapis.com",
        "artifactregistry.googleapis.com",
        "iam.googleapis.com",
    }
    assert all(api.inputs["disableOnDestroy"] is False for api in apis)
    api_urns = {api.urn for api in apis}
    for job in resources.of_type(JOB):
        assert api_urns <= set(job.dependencies)


def test_firestore_database_and_ttl_policy(resources) -> None:
    database = only(resources, "gcp:firestore/database:Database")
    ttl = named(resources, "dedup-ledger-ttl")

    assert database.inputs == {
        "project": PROJECT,
        "name": "run-ledger",
        "locationId": REGION,
        "type": "FIRESTORE_NATIVE",
        "deleteProtectionState": "DELETE_PROTECTION_ENABLED",
        "pointInTimeRecoveryEnablement": "POINT_IN_TIME_RECOVERY_ENABLED",
        "deletionPolicy": "ABANDON",
    }
    assert ttl.inputs["database"] == "run-ledger"
    assert ttl.inputs["collection"] == "scheduler_runs"
    assert ttl.inputs["field"] == "expire_at"
    assert ttl.inputs["ttlConfig"] == {}
    # An explicitly empty index list exempts the field from single-field indexing.
    assert ttl.inputs["indexConfig"] == {"indexes": []}
    assert database.urn in ttl.dependencies


def test_destroy_keeps_the_ttl_policies_with_the_database(resources) -> None:
    # The database is abandoned on destroy; deleting its TTL policies would silently stop
    # expiry on the kept documents, so they are abandoned with it.
    assert only(resources, "gcp:firestore/database:Database").inputs["deletionPolicy"] == (
        "ABANDON"
    )
    fields = resources.of_type("gcp:firestore/field:Field")
    assert sorted(field.name for field in fields) == ["dedup-ledger-ttl", "dedup-work-ttl"]
    for field in fields:
        assert field.inputs["deletionPolicy"] == "ABANDON"


def test_reusing_the_default_database_creates_none(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    multi_job_config["scheduler-dedup:database"] = {"create": False}
    resources = run_program(make_stack(multi_job_config), "test")

    assert resources.of_type("gcp:firestore/database:Database") == []
    # Also the path back after a `pulumi destroy` (which keeps the database): the TTL
    # policies are set again on the kept database, and kept again by the next destroy.
    for ttl in resources.of_type("gcp:firestore/field:Field"):
        assert ttl.inputs["database"] == "(default)"
        assert ttl.inputs["deletionPolicy"] == "ABANDON"
    grant = next(r for r in resources if r.name == "dedup-runtime-ledger-access")
    assert grant.inputs["condition"]["expression"] == (
        f'resource.name == "projects/{PROJECT}/databases/(default)"'
    )


def test_handler_function_settings(resources) -> None:
    function = only(resources, FUNCTION)
    build, service = function.inputs["buildConfig"], function.inputs["serviceConfig"]

    assert function.inputs["name"] == "dedup-handler"
    assert function.inputs["location"] == REGION
    assert build["entryPoint"] == "handle_scheduled_job"
    assert build["runtime"] == "python312"
    assert build["serviceAccount"] == f"projects/{PROJECT}/serviceAccounts/{email('build')}"
    assert build["dockerRepository"] == (
        f"projects/{PROJECT}/locations/{REGION}/repositories/dedup-handler"
    )
    assert service["serviceAccountEmail"] == email("runtime")
    assert service["maxInstanceCount"] == 4
    assert service["maxInstanceRequestConcurrency"] == 2
    # The request timeout covers the largest attempt deadline (10 minutes).
    assert service["timeoutSeconds"] == 600


def test_handler_environment_is_derived_from_the_job_config(resources) -> None:
    env = only(resources, FUNCTION).inputs["serviceConfig"]["environmentVariables"]
    timeout = only(resources, FUNCTION).inputs["serviceConfig"]["timeoutSeconds"]

    assert env["DEDUP_COLLECTION"] == "scheduler_runs"
    # The handler refuses to start under another program's contract.
    assert env["DEDUP_CONTRACT_VERSION"] == str(facts.CONTRACT_VERSION)
    assert env["DEDUP_DATABASE"] == "run-ledger"
    assert env["DEDUP_PROJECT_HEADER"] == "X-Dedup-Project"
    assert env["DEDUP_REGION_HEADER"] == "X-Dedup-Region"
    assert env["DEDUP_MANUAL_RUNS"] == "reject"
    assert env["DEDUP_JOBS_MODULE"] == "jobs"
    assert env["DEDUP_ALLOWED_INVOKERS"] == email("invoker")
    assert env["DEDUP_ALLOWED_PROJECTS"] == PROJECT
    assert env["DEDUP_ALLOWED_REGIONS"] == REGION
    assert env["GOOGLE_CLOUD_PROJECT"] == PROJECT
    # Lease: the request timeout plus the default 60 s margin.
    assert int(env["DEDUP_LEASE_SECONDS"]) == timeout + 60
    # Longest retry window: nightly-report retries until both limits are reached; its
    # 3 retries end after 2610 s, its 2 h maxRetryDuration later: 7200 + one 600 s
    # deadline; plus the default one-day margin.
    assert int(env["DEDUP_RETENTION_SECONDS"]) == 7200 + 600 + 86400


def test_the_handler_knows_the_invoker_by_email_and_by_unique_id(resources) -> None:
    """Google ID tokens always carry `sub` (the account's unique id); `email` is optional."""
    env = only(resources, FUNCTION).inputs["serviceConfig"]["environmentVariables"]
    email_id = email("invoker")
    # The mocks' uniqueId of an account: a number derived from its email
    # (scheduler_dedup.offline.mockrun).
    unique_id = str(int(hashlib.sha256(email_id.encode()).hexdigest(), 16) % 10**21)

    assert env["DEDUP_ALLOWED_INVOKERS"] == email_id
    assert env["DEDUP_ALLOWED_INVOKER_IDS"] == unique_id
    # As many serving threads as requests Cloud Run may send one instance.
    concurrency = only(resources, FUNCTION).inputs["serviceConfig"]["maxInstanceRequestConcurrency"]
    assert env["THREADS"] == str(int(concurrency)) == "2"


def test_one_scheduler_job_per_configured_job(resources) -> None:
    jobs = {job.inputs["name"]: job.inputs for job in resources.of_type(JOB)}

    # The configured jobs, and the stack's audit job, named from the prefix
    # (tests/infra/test_infra_audit.py).
    assert sorted(jobs) == ["dedup-audit", "hourly-sync", "invoice-export", "nightly-report"]
    nightly = jobs["nightly-report"]
    assert nightly["schedule"] == "15 1 * * *"
    assert nightly["timeZone"] == "Europe/Berlin"
    assert nightly["attemptDeadline"] == "600s"
    assert nightly["description"] == "Nightly report"
    assert nightly["retryConfig"] == {
        "retryCount": 3,
        "maxRetryDuration": "7200s",
        "minBackoffDuration": "30s",
        "maxBackoffDuration": "300s",
        "maxDoublings": 2,
    }
    # The body travels base64-encoded, as the Cloud Scheduler API expects.
    assert nightly["httpTarget"]["body"] == "eyJraW5kIjogInJlcG9ydCJ9"
    export = jobs["invoice-export"]
    assert export["timeZone"] == "America/New_York"
    assert export["attemptDeadline"] == "180s"
    assert export["retryConfig"]["retryCount"] == 0
    assert "body" not in export["httpTarget"]
    for job in jobs.values():
        assert job["project"] == PROJECT
        assert job["region"] == REGION


def test_jobs_post_to_the_service_with_an_oidc_token_for_its_url(resources) -> None:
    function = only(resources, FUNCTION)
    service_url = function.outputs["serviceConfig"]["uri"]

    assert service_url.startswith("https://") and service_url.endswith(".run.app")
    assert resources.stack_outputs["serviceUrl"] == service_url
    for job in resources.of_type(JOB):
        target = job.inputs["httpTarget"]
        assert target["httpMethod"] == "POST"
        assert target["uri"] == service_url
        assert target["oidcToken"] == {
            "serviceAccountEmail": email("invoker"),
            "audience": service_url,
        }
        assert target["headers"] == {
            "X-Dedup-Project": PROJECT,
            "X-Dedup-Region": REGION,
            "Content-Type": "application/json",
        }
        assert "oauthToken" not in target


def test_custom_header_names_reach_both_jobs_and_handler(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    multi_job_config["scheduler-dedup:projectHeader"] = "X-Tenant-Project"
    multi_job_config["scheduler-dedup:regionHeader"] = "X-Tenant-Region"
    resources = run_program(make_stack(multi_job_config), "test")

    env = only(resources, FUNCTION).inputs["serviceConfig"]["environmentVariables"]
    assert (env["DEDUP_PROJECT_HEADER"], env["DEDUP_REGION_HEADER"]) == (
        "X-Tenant-Project",
        "X-Tenant-Region",
    )
    for job in resources.of_type(JOB):
        headers = job.inputs["httpTarget"]["headers"]
        assert (headers["X-Tenant-Project"], headers["X-Tenant-Region"]) == (PROJECT, REGION)


def test_nothing_is_public_and_no_primitive_or_default_identities(resources) -> None:
    everything = [s for resource in resources for s in strings(resource.inputs)]

    assert not any(s in ("allUsers", "allAuthenticatedUsers") for s in everything)
    assert not any(s in ("roles/owner", "roles/editor", "roles/viewer") for s in everything)
    assert not any("-compute@developer.gserviceaccount.com" in s for s in everything)
    assert not any("@appspot.gserviceaccount.com" in s for s in everything)
    assert not any(s.endswith("@cloudbuild.gserviceaccount.com") for s in everything)
    assert not resources.of_type("gcp:cloudrunv2/service:Service")  # no invokerIamDisabled
    service = only(resources, FUNCTION).inputs["serviceConfig"]
    assert service["serviceAccountEmail"] == email("runtime")


def grants_by_member(resources) -> dict[str, set[tuple[str, ...]]]:
    """member -> {(type, role, resource the grant is on, condition expression)}."""
    grants: dict[str, set[tuple[str, ...]]] = {}
    for resource in resources:
        if resource.type not in IAM_TYPES:
            continue
        inputs = resource.inputs
        target = (
            inputs.get("serviceAccountId")
            or inputs.get("bucket")
            or inputs.get("repository")
            or inputs.get("name")
            or f"projects/{inputs['project']}"
        )
        condition = (inputs.get("condition") or {}).get("expression", "")
        grants.setdefault(inputs["member"], set()).add(
            (resource.type.split(":")[1], inputs["role"], target, condition)
        )
    return grants


def test_each_account_holds_exactly_its_intended_grants(resources) -> None:
    function = only(resources, FUNCTION)
    number = mock_project_number(PROJECT)
    service_name = function.outputs["serviceConfig"]["service"]

    assert grants_by_member(resources) == {
        f"serviceAccount:{email('runtime')}": {
            (
                "projects/iAMMember",
                role_name(PROJECT, "dedup-ledger-role", "dedup_ledger_rw"),
                f"projects/{PROJECT}",
                f'resource.name == "projects/{PROJECT}/databases/run-ledger"',
            ),
            # The audit's one listing of the Scheduler jobs' live state: a custom role.
            (
                "projects/iAMMember",
                role_name(PROJECT, "dedup-scheduler-read-role", "dedup_scheduler_read"),
                f"projects/{PROJECT}",
                "",
            ),
            # The audit's read of Scheduler's Admin Activity log (pauses and resumes).
            (
                "projects/iAMMember",
                role_name(PROJECT, "dedup-pause-log-role", "dedup_pause_log_read"),
                f"projects/{PROJECT}",
                "",
            ),
        },
        f"serviceAccount:{email('invoker')}": {
            ("cloudrunv2/serviceIamMember", "roles/run.invoker", service_name, "")
        },
        f"serviceAccount:{email('build')}": {
            ("projects/iAMMember", "roles/logging.logWriter", f"projects/{PROJECT}", ""),
            (
                "artifactregistry/repositoryIamMember",
                "roles/artifactregistry.writer",
                "dedup-handler",
                "",
            ),
            (
                "storage/bucketIAMMember",
                "roles/storage.objectViewer",
                f"{PROJECT}-dedup-source",
                "",
            ),
            (
                "projects/iAMMember",
                "roles/storage.objectAdmin",
                f"projects/{PROJECT}",
                f'resource.name.startsWith("projects/_/buckets/gcf-v2-sources-{number}-{REGION}")',
            ),
        },
    }


def test_runtime_role_allows_only_document_reads_and_writes(resources) -> None:
    role = named(resources, "dedup-ledger-role")

    assert sorted(role.inputs["permissions"]) == [
        "datastore.entities.create",
        "datastore.entities.get",
        "datastore.entities.update",
    ]


def test_jobs_wait_for_the_grants_they_rely_on(resources) -> None:
    invoker = named(resources, "dedup-invoker-run")
    function = only(resources, FUNCTION)
    wait = named(resources, "dedup-invocation-grants-wait")
    assert invoker.urn in wait.dependencies
    for job in resources.of_type(JOB):
        assert {wait.urn, function.urn} <= set(job.dependencies)
    ledger = named(resources, "dedup-runtime-ledger-access")
    build_log = named(resources, "dedup-build-log-writer")
    build_wait = named(resources, "dedup-build-grants-wait")
    assert {ledger.urn, build_log.urn} <= set(build_wait.dependencies)
    assert build_wait.urn in function.dependencies


def test_no_grant_to_the_scheduler_service_agent(resources) -> None:
    # "Use authentication with HTTP targets": the job's account needs run.invoker on the
    # service; the Scheduler service agent mints its tokens with its own
    # roles/cloudscheduler.serviceAgent. A grant to the agent is not needed, and on a new
    # project it fails the first `up` while the agent does not exist yet.
    everything = [s for resource in resources for s in strings(resource.inputs)]

    assert not any("gcp-sa-cloudscheduler" in s for s in everything)
    assert not any(s == "roles/iam.serviceAccountOpenIdTokenCreator" for s in everything)
    assert not resources.of_type("gcp:serviceaccount/iAMMember:IAMMember")


def test_the_build_waits_for_iam_propagation_after_its_grants(resources) -> None:
    # IAM grants take effect "typically" within 2 minutes ("Access change propagation");
    # a build started before its grants apply fails the first `up`.
    wait = named(resources, "dedup-build-grants-wait")
    build_grants = [
        named(resources, name)
        for name in (
            "dedup-build-log-writer",
            "dedup-build-image-writer",
            "dedup-build-source-reader",
            "dedup-build-staged-source-reader",
            "dedup-runtime-ledger-access",
        )
    ]

    assert wait.type == "time:index/sleep:Sleep"
    assert wait.inputs["createDuration"] == "120s"
    assert {grant.urn for grant in build_grants} <= set(wait.dependencies)
    # The grants' ids are the triggers: a later `up` that changes a grant waits again.
    assert len(wait.inputs["triggers"]) == len(build_grants)
    assert wait.urn in only(resources, FUNCTION).dependencies
    assert wait.parent == only(resources, "scheduler-dedup:index:HandlerService").urn


def test_ingress_is_internal_only_by_default(resources) -> None:
    # Cloud Scheduler in the same project reaches an internal-only service at its
    # run.app URL ("Restrict network ingress for Cloud Run"); the internet does not.
    service = only(resources, FUNCTION).inputs["serviceConfig"]
    assert service["ingressSettings"] == "ALLOW_INTERNAL_ONLY"


@pytest.mark.parametrize(
    ("value", "setting"),
    [("internal-and-gclb", "ALLOW_INTERNAL_AND_GCLB"), ("all", "ALLOW_ALL")],
)
def test_ingress_is_configurable_per_stack(
    make_stack: Callable[[dict[str, Any]], Path],
    multi_job_config: dict[str, Any],
    value: str,
    setting: str,
) -> None:
    multi_job_config["scheduler-dedup:ingress"] = value
    resources = run_program(make_stack(multi_job_config), "test")

    assert only(resources, FUNCTION).inputs["serviceConfig"]["ingressSettings"] == setting


def test_image_repository_cleans_up_old_images(resources) -> None:
    repository = only(resources, "gcp:artifactregistry/repository:Repository")

    assert repository.inputs["cleanupPolicyDryRun"] is False
    policies = {policy["id"]: policy for policy in repository.inputs["cleanupPolicies"]}
    assert policies["keep-newest"] == {
        "id": "keep-newest",
        "action": "KEEP",
        "mostRecentVersions": {"keepCount": 5},
    }
    assert policies["delete-old"] == {
        "id": "delete-old",
        "action": "DELETE",
        "condition": {"tagState": "ANY", "olderThan": "2592000s"},
    }


def test_runtime_role_description_says_what_it_allows(resources) -> None:
    role = named(resources, "dedup-ledger-role")
    assert role.inputs["description"] == "Get, create and update documents; nothing else."
    assert "delete" not in role.inputs["description"].lower()


def test_stack_outputs_tell_the_user_what_was_built(resources) -> None:
    outputs = resources.stack_outputs

    assert outputs["jobNames"] == [
        "nightly-report",
        "hourly-sync",
        "invoice-export",
        "dedup-audit",
    ]
    assert outputs["runtimeServiceAccount"] == email("runtime")
    assert outputs["invokerServiceAccount"] == email("invoker")
    assert outputs["buildServiceAccount"] == email("build")
    assert outputs["database"] == "run-ledger"
    assert outputs["collection"] == "scheduler_runs"
    assert outputs["forceRunCommands"]["hourly-sync"] == (
        f"gcloud scheduler jobs run hourly-sync --location={REGION} --project={PROJECT}"
    )
    assert only(resources, STACK_TYPE).outputs == outputs


def source_object(resources) -> str:
    function = only(resources, FUNCTION)
    archive = only(resources, "gcp:storage/bucketObject:BucketObject")
    name = function.inputs["buildConfig"]["source"]["storageSource"]["object"]
    assert name == archive.inputs["name"]
    return name


def test_a_handler_code_change_deploys_a_new_revision(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    project = make_stack(multi_job_config)
    first = source_object(run_program(project, "test"))
    assert source_object(run_program(project, "test")) == first

    cache = project / "handler" / "__pycache__"
    cache.mkdir()
    (cache / "main.cpython-311.pyc").write_bytes(b"\x00bytecode")
    assert source_object(run_program(project, "test")) == first

    (project / "handler" / "main.py").write_text("def handle_scheduled_job(request):\n    ...\n")
    changed = source_object(run_program(project, "test"))
    assert changed != first
    assert changed.startswith("handler-") and changed.endswith(".zip")


def test_archive_holds_the_teams_handler_and_the_installed_runledger_without_caches(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    # The project is laid out as a team's copy: handler/ has no runledger of its own.
    project = make_stack(multi_job_config)
    (project / "handler" / "__pycache__").mkdir()
    (project / "handler" / "__pycache__" / "jobs.cpython-311.pyc").write_bytes(b"\x00")
    archive = only(run_program(project, "test"), "gcp:storage/bucketObject:BucketObject")

    assets = archive.inputs["source"].assets
    installed = Path(runledger.__file__).parent
    library = sorted(
        f"runledger/{path.relative_to(installed).as_posix()}"
        for path in installed.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    )
    assert sorted(assets) == sorted(["jobs.py", "main.py", "requirements.txt", *library])
    assert "runledger/ledger/machine.py" in library
    assert assets["runledger/facts.py"].path == str(installed / "facts.py")
    # One requirements file: runledger's pins, the team's identical pin not repeated.
    requirements = assets["requirements.txt"].text
    assert (installed / "requirements.txt").read_text() in requirements
    assert requirements.count("functions-framework") == 1
    # Named by the hash over all of it, runledger included (tests/infra/test_infra_source.py).
    digest = handler_archive(project / "handler").digest()
    assert archive.inputs["name"] == f"handler-{digest[:20]}.zip"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"scheduler-dedup:jobs": [{"id": "hourly-sync", "schedule": "every 5 minutes"}]},
            "scheduler-dedup:jobs[0].schedule: 'every 5 minutes' is groc syntax",
        ),
        (
            {"scheduler-dedup:jobs": [{"id": "x", "schedule": "0 * * * *", "attemptDeadline": 5}]},
            "scheduler-dedup:jobs[0].attemptDeadline: 5s is outside",
        ),
        ({"scheduler-dedup:requestTimeout": "5m"}, "requestTimeout: 300s must be at least"),
        ({"scheduler-dedup:maxInstanse": 3}, "scheduler-dedup:maxInstanse: unknown key"),
        ({"gcp:project": None}, "gcp:project: required"),
        ({"scheduler-dedup:handlerDir": "no-such-dir"}, "no-such-dir does not exist"),
    ],
)
def test_bad_config_stops_the_program_with_the_key_in_the_message(
    make_stack: Callable[[dict[str, Any]], Path],
    multi_job_config: dict[str, Any],
    change: dict[str, Any],
    message: str,
) -> None:
    config = {key: value for key, value in {**multi_job_config, **change}.items() if value}

    with pytest.raises(ProgramFailed) as caught:
        run_program(make_stack(config), "test")

    assert message in str(caught.value)
