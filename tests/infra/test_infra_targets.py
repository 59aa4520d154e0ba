"""Proxy targets (issue 8): per-job grants for the runtime account, and the work TTL.

A job's `target` names the one workflow or Cloud Run job the handler starts for it.
The stack turns that into the narrowest grant that works and nothing more; the
handler itself learns the target only from its jobs module, so the function's
environment must not change. Everything is asserted in wire form under mocks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from runledger.sdk.registry import load_jobs
from scheduler_dedup.offline.mockrun import CapturedResource, ProgramFailed, run_program
from scheduler_dedup.offline.stack_file import read_project_name
from tests.infra.conftest import SharedRuns, role_id, role_name
from tests.stacks import REPO_STACKS, repo_stack_file

REPO = Path(__file__).resolve().parents[2]
PROJECT = "dedup-test-project"
REGION = "europe-west3"
OTHER_PROJECT = "batch-jobs-prod"
RUNTIME = f"serviceAccount:dedup-runtime@{PROJECT}.iam.gserviceaccount.com"
WORKFLOW = f"projects/{PROJECT}/locations/{REGION}/workflows/nightly-etl"
RUN_JOB = f"projects/{PROJECT}/locations/{REGION}/jobs/sync-crm"
OTHER_RUN_JOB = f"projects/{OTHER_PROJECT}/locations/us-east1/jobs/reindex"

FIELD = "gcp:firestore/field:Field"
JOB = "gcp:cloudscheduler/job:Job"
FUNCTION = "gcp:cloudfunctionsv2/function:Function"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
JOB_MEMBER = "gcp:cloudrunv2/jobIamMember:JobIamMember"
CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
IAM_TYPES = (
    PROJECT_MEMBER,
    JOB_MEMBER,
    "gcp:serviceaccount/iAMMember:IAMMember",
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember",
    "gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
)


def named(resources: list[CapturedResource], name: str) -> CapturedResource:
    (match,) = [resource for resource in resources if resource.name == name]
    return match


def with_targets(config: dict[str, Any]) -> dict[str, Any]:
    """The multi-job stack with a workflow target, a Cloud Run job target in the stack's
    project, one in another project, and `invoice-export` left without a target."""
    jobs = config["scheduler-dedup:jobs"]
    jobs[0]["target"] = {"workflow": WORKFLOW}
    jobs[1]["target"] = {"cloudRunJob": RUN_JOB}
    jobs.append(
        {"id": "reindex", "schedule": "0 4 * * 0", "target": {"cloudRunJob": OTHER_RUN_JOB}}
    )
    return config


@pytest.fixture
def targeted(shared_run: SharedRuns, multi_job_config: dict[str, Any]):
    return shared_run(with_targets(multi_job_config))


@pytest.fixture
def plain(shared_run: SharedRuns, multi_job_config: dict[str, Any]):
    return shared_run(multi_job_config)


def runtime_grants(resources) -> set[tuple[str, ...]]:
    """(type, project, location, resource, role, condition) of each grant to the runtime account."""
    found = set()
    for resource in resources:
        if resource.type not in IAM_TYPES or resource.inputs["member"] != RUNTIME:
            continue
        inputs = resource.inputs
        condition = inputs.get("condition") or {}
        found.add(
            (
                resource.type,
                inputs.get("project", ""),
                inputs.get("location", ""),
                inputs.get("name", ""),
                inputs["role"],
                condition.get("expression", ""),
            )
        )
    return found


LEDGER_GRANT = (
    PROJECT_MEMBER,
    PROJECT,
    "",
    "",
    role_name(PROJECT, "dedup-ledger-role", "dedup_ledger_rw"),
    f'resource.name == "projects/{PROJECT}/databases/run-ledger"',
)
# The audit's listing of the Scheduler jobs' live state: read only, on the stack's project.
SCHEDULER_VIEW_GRANT = (
    PROJECT_MEMBER,
    PROJECT,
    "",
    "",
    role_name(PROJECT, "dedup-scheduler-read-role", "dedup_scheduler_read"),
    "",
)
# The audit's read of Scheduler's Admin Activity log: logging.logEntries.list alone.
PAUSE_LOG_GRANT = (
    PROJECT_MEMBER,
    PROJECT,
    "",
    "",
    role_name(PROJECT, "dedup-pause-log-role", "dedup_pause_log_read"),
    "",
)


# --- TTL on the checkpoint/output subcollection ---------------------------------------


def test_work_items_get_the_same_ttl_policy_as_the_ledger(plain) -> None:
    ledger = named(plain, "dedup-ledger-ttl")
    work = named(plain, "dedup-work-ttl")

    assert len(plain.of_type(FIELD)) == 2
    assert work.inputs == {
        "project": PROJECT,
        "database": "run-ledger",
        "collection": "runledger_work",
        "field": "expire_at",
        "ttlConfig": {},
        "indexConfig": {"indexes": []},
        "deletionPolicy": "ABANDON",
    }
    assert {key: value for key, value in ledger.inputs.items() if key != "collection"} == {
        key: value for key, value in work.inputs.items() if key != "collection"
    }
    # Firestore serialises field operations per database: the second waits for the first.
    database = named(plain, "dedup-ledger-db")
    assert {ledger.urn, database.urn} <= set(work.dependencies)
    assert work.urn not in ledger.dependencies


def test_work_ttl_covers_the_collection_the_handler_writes(plain) -> None:
    from runledger.facts import WORK_COLLECTION

    assert named(plain, "dedup-work-ttl").inputs["collection"] == WORK_COLLECTION


def test_the_ledger_collection_cannot_be_the_work_collection(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    multi_job_config["scheduler-dedup:collection"] = "runledger_work"

    with pytest.raises(ProgramFailed) as caught:
        run_program(make_stack(multi_job_config), "test")

    assert str(caught.value).startswith("scheduler-dedup:collection: 'runledger_work' is the")


# --- grants ---------------------------------------------------------------------------


def test_without_targets_the_runtime_account_only_reaches_the_ledger_and_reads_scheduler(
    plain,
) -> None:
    assert runtime_grants(plain) == {LEDGER_GRANT, SCHEDULER_VIEW_GRANT, PAUSE_LOG_GRANT}
    assert not plain.of_type(JOB_MEMBER)
    assert sorted(role.inputs["roleId"] for role in plain.of_type(CUSTOM_ROLE)) == sorted(
        [
            role_id("dedup-ledger-role", "dedup_ledger_rw"),
            role_id("dedup-pause-log-role", "dedup_pause_log_read"),
            role_id("dedup-scheduler-read-role", "dedup_scheduler_read"),
        ]
    )
    assert not any(r.name.startswith("dedup-target-") for r in plain)


def test_each_target_gets_exactly_its_grant(targeted) -> None:
    assert runtime_grants(targeted) == {
        LEDGER_GRANT,
        SCHEDULER_VIEW_GRANT,
        PAUSE_LOG_GRANT,
        # Workflows roles go no lower than the project and Workflows ignores
        # resource-name conditions: an unconditioned grant on the workflow's project.
        (PROJECT_MEMBER, PROJECT, "", "", "roles/workflows.invoker", ""),
        # Cloud Run jobs have their own IAM policy: the run-job role on that job only.
        (
            JOB_MEMBER,
            PROJECT,
            REGION,
            "sync-crm",
            role_name(PROJECT, "dedup-run-job-role", "dedup_run_job"),
            "",
        ),
        # A job in another project: granted there, with the role defined in that project.
        (
            JOB_MEMBER,
            OTHER_PROJECT,
            "us-east1",
            "reindex",
            role_name(OTHER_PROJECT, f"dedup-run-job-role-{OTHER_PROJECT}", "dedup_run_job"),
            "",
        ),
    }


def test_grant_names(targeted) -> None:
    workflow = named(targeted, f"dedup-workflow-invoker-{PROJECT}")
    assert workflow.type == PROJECT_MEMBER
    # A condition on resource.name would never match: Workflows is not among the
    # services that recognise resource attributes, so the grant would never apply.
    assert "condition" not in workflow.inputs
    assert named(targeted, "dedup-target-hourly-sync").type == JOB_MEMBER
    assert named(targeted, "dedup-target-reindex").type == JOB_MEMBER
    assert not any(r.name == "dedup-target-invoice-export" for r in targeted)


def test_run_job_role_holds_only_run_and_run_with_overrides(targeted) -> None:
    roles = {role.name: role.inputs for role in targeted.of_type(CUSTOM_ROLE)}

    assert set(roles) == {
        "dedup-ledger-role",
        "dedup-scheduler-read-role",
        "dedup-pause-log-role",
        "dedup-run-job-role",
        f"dedup-run-job-role-{OTHER_PROJECT}",
    }
    for name, project in (
        ("dedup-run-job-role", PROJECT),
        (f"dedup-run-job-role-{OTHER_PROJECT}", OTHER_PROJECT),
    ):
        assert roles[name]["project"] == project
        assert roles[name]["roleId"] == role_id(name, "dedup_run_job")
        assert roles[name]["stage"] == "GA"
        # run.invoker has run.jobs.run but not runWithOverrides, which the handler's
        # env overrides (run key, schedule time) need; nothing else is included.
        assert sorted(roles[name]["permissions"]) == ["run.jobs.run", "run.jobs.runWithOverrides"]


def test_two_jobs_on_one_project_share_the_run_job_role(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    jobs = multi_job_config["scheduler-dedup:jobs"]
    jobs[0]["target"] = {"cloudRunJob": RUN_JOB}
    jobs[1]["target"] = {"cloudRunJob": RUN_JOB.replace("sync-crm", "reindex")}
    resources = run_program(make_stack(multi_job_config), "test")

    assert sorted(r.name for r in resources.of_type(CUSTOM_ROLE)) == [
        "dedup-ledger-role",
        "dedup-pause-log-role",
        "dedup-run-job-role",
        "dedup-scheduler-read-role",
    ]
    assert sorted(g.inputs["name"] for g in resources.of_type(JOB_MEMBER)) == [
        "reindex",
        "sync-crm",
    ]


def test_two_jobs_on_one_cloud_run_job_share_one_grant(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    # Two JobIamMember resources for one member, role and job: deleting either would
    # remove the binding the other job still needs.
    jobs = multi_job_config["scheduler-dedup:jobs"]
    jobs[0]["target"] = {"cloudRunJob": RUN_JOB}
    jobs[1]["target"] = {"cloudRunJob": RUN_JOB}
    resources = run_program(make_stack(multi_job_config), "test")

    grants = resources.of_type(JOB_MEMBER)
    assert [g.inputs["name"] for g in grants] == ["sync-crm"]
    scheduler = {job.inputs["name"]: job for job in resources.of_type(JOB)}
    for job in jobs[:2]:
        assert grants[0].urn in scheduler[job["id"]].dependencies


def test_scheduler_jobs_wait_for_their_own_target_grant(targeted) -> None:
    scheduler = {job.inputs["name"]: job for job in targeted.of_type(JOB)}
    grants = {
        job_id: named(targeted, f"dedup-target-{job_id}").urn
        for job_id in ("hourly-sync", "reindex")
    }
    grants["nightly-report"] = named(targeted, f"dedup-workflow-invoker-{PROJECT}").urn

    for job_id, grant in grants.items():
        assert grant in scheduler[job_id].dependencies
        others = set(grants.values()) - {grant}
        assert not others & set(scheduler[job_id].dependencies)
    assert not set(grants.values()) & set(scheduler["invoice-export"].dependencies)


def test_scheduler_jobs_start_after_every_grant_has_had_time_to_apply(targeted) -> None:
    # IAM grants take effect after a delay ("Access change propagation"); a job's first
    # delivery must not race its target grant or the invoker's run.invoker.
    wait = named(targeted, "dedup-invocation-grants-wait")
    invoker = named(targeted, "dedup-invoker-run")
    target_grants = [
        named(targeted, name).urn
        for name in (f"dedup-workflow-invoker-{PROJECT}", "dedup-target-hourly-sync")
    ]

    assert wait.type == "time:index/sleep:Sleep"
    assert wait.inputs["createDuration"] == "120s"
    assert {invoker.urn, *target_grants} <= set(wait.dependencies)
    assert len(wait.inputs["triggers"]) == 4  # run.invoker and the three target grants
    for job in targeted.of_type(JOB):
        assert wait.urn in job.dependencies


def test_two_workflow_jobs_in_one_project_share_one_grant(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    # Two resources managing the same binding member: deleting either would remove the
    # grant the other still needs.
    jobs = multi_job_config["scheduler-dedup:jobs"]
    jobs[0]["target"] = {"workflow": WORKFLOW}
    jobs[1]["target"] = {"workflow": WORKFLOW.replace("nightly-etl", "hourly-etl")}
    resources = run_program(make_stack(multi_job_config), "test")

    workflow_grants = [
        r
        for r in resources.of_type(PROJECT_MEMBER)
        if r.inputs["role"] == "roles/workflows.invoker"
    ]
    assert [g.name for g in workflow_grants] == [f"dedup-workflow-invoker-{PROJECT}"]
    scheduler = {job.inputs["name"]: job for job in resources.of_type(JOB)}
    for job_id in ("nightly-report", "hourly-sync"):
        assert workflow_grants[0].urn in scheduler[job_id].dependencies


def test_workflow_targets_enable_the_workflow_executions_api(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any], plain
) -> None:
    # runledger.targets.workflow_target calls workflowexecutions.googleapis.com (the
    # ExecutionsClient's endpoint); the stack's project and the workflow's need it.
    jobs = multi_job_config["scheduler-dedup:jobs"]
    jobs[0]["target"] = {"workflow": WORKFLOW}
    jobs[1]["target"] = {"workflow": f"projects/{OTHER_PROJECT}/locations/us-east1/workflows/w"}
    resources = run_program(make_stack(multi_job_config), "test")

    apis = {
        (api.inputs["project"], api.inputs["service"]): api
        for api in resources.of_type("gcp:projects/service:Service")
    }
    for project in (PROJECT, OTHER_PROJECT):
        api = apis[(project, "workflowexecutions.googleapis.com")]
        assert api.inputs["disableOnDestroy"] is False
        for job in resources.of_type(JOB):
            assert api.urn in job.dependencies
    other_grant = named(resources, f"dedup-workflow-invoker-{OTHER_PROJECT}")
    assert (other_grant.inputs["project"], other_grant.inputs["role"]) == (
        OTHER_PROJECT,
        "roles/workflows.invoker",
    )
    # Without a workflow target the API is not enabled.
    assert not [
        api
        for api in plain.of_type("gcp:projects/service:Service")
        if api.inputs["service"] == "workflowexecutions.googleapis.com"
    ]


def test_targets_reach_the_handler_only_through_its_jobs_module(targeted, plain) -> None:
    def env(resources) -> dict[str, str]:
        (function,) = resources.of_type(FUNCTION)
        return function.inputs["serviceConfig"]["environmentVariables"]

    assert env(targeted) == env(plain)
    assert sorted(job.inputs["name"] for job in targeted.of_type(JOB)) == [
        "dedup-audit",
        "hourly-sync",
        "invoice-export",
        "nightly-report",
        "reindex",
    ]
    # The Scheduler still calls the handler, never the target API directly.
    for job in targeted.of_type(JOB):
        assert job.inputs["httpTarget"]["uri"].endswith(".run.app")


def test_nothing_public_or_primitive_with_targets(targeted) -> None:
    for resource in targeted:
        if resource.type in IAM_TYPES:
            assert resource.inputs["member"] not in ("allUsers", "allAuthenticatedUsers")
            assert resource.inputs["role"] not in ("roles/owner", "roles/editor", "roles/viewer")


# --- config validation ----------------------------------------------------------------

KEY = "scheduler-dedup:jobs[0].target"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ({}, f"{KEY}: set exactly one of workflow or cloudRunJob (neither was given)"),
        (
            {"workflow": WORKFLOW, "cloudRunJob": RUN_JOB},
            f"{KEY}: set exactly one of workflow or cloudRunJob (both were given)",
        ),
        ({"cloudrunjob": RUN_JOB}, f"{KEY}.cloudrunjob: unknown key"),
        ("not json", f"{KEY}: not valid JSON"),
        ([WORKFLOW], f"{KEY}: expected an object"),
        ({"workflow": 42}, f"{KEY}.workflow: 42 is not projects/PROJECT_ID/locations/REGION/"),
        (
            {"workflow": "nightly-etl"},
            f"{KEY}.workflow: 'nightly-etl' is not a resource name like "
            "projects/PROJECT_ID/locations/REGION/workflows/WORKFLOW",
        ),
        # A Cloud Run job name where a workflow is expected, and the other way round.
        ({"workflow": RUN_JOB}, f"{KEY}.workflow: {RUN_JOB!r} is not a resource name like"),
        ({"cloudRunJob": WORKFLOW}, f"{KEY}.cloudRunJob: {WORKFLOW!r} is not a resource name"),
        # Project numbers are refused: grants and conditions use the project id.
        (
            {"cloudRunJob": "projects/123456789012/locations/us-east1/jobs/reindex"},
            f"{KEY}.cloudRunJob: 'projects/123456789012/locations/us-east1/jobs/reindex' is not",
        ),
        # Cloud Run job names are lowercase; trailing slashes and extra segments are not names.
        ({"cloudRunJob": RUN_JOB.replace("sync-crm", "Sync")}, f"{KEY}.cloudRunJob: "),
        ({"workflow": WORKFLOW + "/"}, f"{KEY}.workflow: "),
        ({"workflow": WORKFLOW + "/executions/e1"}, f"{KEY}.workflow: "),
        ({"workflow": WORKFLOW.replace(REGION, "global")}, f"{KEY}.workflow: "),
    ],
)
def test_bad_targets_stop_the_program_naming_the_key(
    make_stack: Callable[[dict[str, Any]], Path],
    multi_job_config: dict[str, Any],
    target: Any,
    message: str,
) -> None:
    multi_job_config["scheduler-dedup:jobs"][0]["target"] = target

    with pytest.raises(ProgramFailed) as caught:
        run_program(make_stack(multi_job_config), "test")

    assert str(caught.value).startswith(message)


def test_target_given_as_json_text_is_accepted(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    # `pulumi config set --path` and `pulumi new` prompts store objects as JSON text.
    multi_job_config["scheduler-dedup:jobs"][2]["target"] = f'{{"workflow": "{WORKFLOW}"}}'
    resources = run_program(make_stack(multi_job_config), "test")

    grant = named(resources, f"dedup-workflow-invoker-{PROJECT}")
    assert grant.inputs["role"] == "roles/workflows.invoker"
    assert grant.urn in named(resources, "dedup-job-invoice-export").dependencies


def test_template_documents_the_target_key() -> None:
    document = yaml.safe_load((REPO / "Pulumi.yaml").read_text(encoding="utf-8"))
    description = document["template"]["config"]["jobs"]["description"]

    for word in ("target", '"workflow"', '"cloudRunJob"', "roles/workflows.invoker"):
        assert word in description


@pytest.mark.parametrize("stack", REPO_STACKS)
def test_every_job_of_every_stack_is_defined_in_the_handlers_jobs_module(stack: str) -> None:
    """A stack job the handler does not define would answer 404 on every delivery."""
    document = yaml.safe_load(repo_stack_file(stack).read_text(encoding="utf-8"))
    jobs = document["config"][f"{read_project_name(REPO)}:jobs"]

    assert {job["id"] for job in jobs} <= set(load_jobs("jobs"))
