"""`DedupSchedule`: the handler, its ledger and its Cloud Scheduler jobs as one component.

Everything the schedule needs is a child of one `ComponentResource` (`parent=self`,
every name built from `ScheduleConfig.name_prefix`), so another Pulumi program can
reuse the whole unit by constructing `DedupSchedule` with its own config.

Security model, each grant on the narrowest resource that works:

* runtime account: only document get/create/update, in the one ledger database;
  plus, per job with a proxy `target`, the right to start that one workflow
  (`roles/workflows.invoker`) or run that one Cloud Run job (`run.jobs.run` and
  `run.jobs.runWithOverrides`), and nothing for jobs without one;
* invoker account: `roles/run.invoker` on this one Cloud Run service, nothing else;
* Cloud Scheduler service agent: may mint OIDC tokens for the invoker account only;
* build account: writes the image to this stack's own repository, reads the source,
  writes build logs.

No primitive roles are used and no resource runs as the default compute account.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_gcp as gcp

from dedup_schedule.config import WORK_COLLECTION, JobConfig, ScheduleConfig, TargetConfig
from dedup_schedule.source import handler_files, source_digest

# APIs the stack calls, enabled by the stack itself. They stay enabled on destroy:
# other workloads in the project may rely on them.
REQUIRED_APIS = (
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "logging.googleapis.com",
    "run.googleapis.com",
    "storage.googleapis.com",
)

# Exactly the Firestore permissions the handler uses: get (read a run or its
# checkpoints), create (claim with exists=false, once-only checkpoints and outputs)
# and update (update_time-guarded renewal, completion and release). It never deletes
# (a release is an update to `released`; only operators delete), lists, queries or
# opens a transaction, so datastore.entities.delete/list and datastore.databases.get
# are left out; roles/datastore.user would add those and index/statistics access on
# every database.
LEDGER_PERMISSIONS = (
    "datastore.entities.create",
    "datastore.entities.get",
    "datastore.entities.update",
)

# What `runledger.targets.cloud_run_job_target` needs on the one job it runs: start an
# execution (run.jobs.run) with the run key and schedule time as environment overrides
# (run.jobs.runWithOverrides, which roles/run.invoker lacks; the predefined roles that
# have it, such as roles/run.developer, grant much more). Google's docs name only
# these two permissions for jobs.run. Running needs no iam.serviceAccounts.actAs on the
# job's service account: that is checked when a job is created or updated, and env
# overrides cannot change the identity the job runs as.
RUN_JOB_PERMISSIONS = ("run.jobs.run", "run.jobs.runWithOverrides")
WORKFLOW_INVOKER_ROLE = "roles/workflows.invoker"

ENTRY_POINT = "handle_scheduled_job"
TTL_FIELD = "expire_at"


@dataclass(frozen=True)
class _BuildInputs:
    """What the function build consumes: the source archive, image repository, grants."""

    source_object: gcp.storage.BucketObject
    docker_repository: pulumi.Output[str]
    grants: list[pulumi.Resource]


@dataclass(frozen=True)
class DedupScheduleArgs:
    """Inputs of `DedupSchedule`.

    config: the validated stack config (see `dedup_schedule.config.parse_config`).
    handler_dir: the handler's source directory on disk, packaged on every run.
    """

    config: ScheduleConfig
    handler_dir: Path


class DedupSchedule(pulumi.ComponentResource):
    """Cloud Scheduler jobs calling an authenticated, deduplicating Cloud Run function."""

    service_url: pulumi.Output[str]
    job_names: pulumi.Output[list[str]]
    runtime_service_account: pulumi.Output[str]
    invoker_service_account: pulumi.Output[str]
    build_service_account: pulumi.Output[str]
    database: pulumi.Output[str]
    collection: str
    force_run_commands: pulumi.Output[dict[str, str]]

    def __init__(
        self,
        name: str,
        args: DedupScheduleArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("scheduler-dedup:index:DedupSchedule", name, None, opts)
        self._cfg = args.config
        self._prefix = args.config.name_prefix
        cfg = self._cfg

        self._apis = self._enable_apis()
        # Service agents are named after the project number, which config does not hold.
        self._project_number = gcp.organizations.get_project_output(
            project_id=cfg.project,
            opts=pulumi.InvokeOutputOptions(parent=self, depends_on=self._apis),
        ).number
        database = self._ledger_database()
        runtime_sa = self._account("runtime", "Runs the deduplicating Cloud Scheduler handler")
        invoker_sa = self._account("invoker", "Identity Cloud Scheduler calls the handler as")
        build_sa = self._account("build", "Builds the handler's container image")
        ledger_grant = self._grant_ledger_access(runtime_sa, database)
        build = self._build_prerequisites(args.handler_dir, build_sa)
        function = self._handler_function(runtime_sa, invoker_sa, build_sa, build, ledger_grant)
        service_url = function.service_config.apply(lambda service: service.uri)
        invoker_grants = self._grant_invocation(function, invoker_sa)
        target_grants = self._grant_target_access(runtime_sa)
        jobs = [
            self._scheduler_job(
                job,
                service_url,
                invoker_sa,
                [*invoker_grants, *target_grants.get(job.id, [])],
            )
            for job in cfg.jobs
        ]

        self.service_url = service_url
        self.job_names = pulumi.Output.all(*[job.name for job in jobs])
        self.runtime_service_account = runtime_sa.email
        self.invoker_service_account = invoker_sa.email
        self.build_service_account = build_sa.email
        self.database = database
        self.collection = cfg.collection
        self.force_run_commands = self.job_names.apply(
            lambda names: {job_name: self._force_run_command(job_name) for job_name in names}
        )
        self.register_outputs(
            {
                "serviceUrl": self.service_url,
                "jobNames": self.job_names,
                "runtimeServiceAccount": self.runtime_service_account,
                "invokerServiceAccount": self.invoker_service_account,
                "buildServiceAccount": self.build_service_account,
                "database": self.database,
                "collection": self.collection,
                "forceRunCommands": self.force_run_commands,
            }
        )

    def _child_name(self, suffix: str) -> str:
        return f"{self._prefix}-{suffix}"

    def _child_opts(
        self, depends_on: list[pulumi.Resource] | None = None
    ) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, depends_on=[*self._apis, *(depends_on or [])])

    def _force_run_command(self, job_name: str) -> str:
        cfg = self._cfg
        return (
            f"gcloud scheduler jobs run {job_name} --location={cfg.region} --project={cfg.project}"
        )

    def _enable_apis(self) -> list[pulumi.Resource]:
        return [
            gcp.projects.Service(
                self._child_name(f"api-{api.split('.')[0]}"),
                gcp.projects.ServiceArgs(
                    project=self._cfg.project,
                    service=api,
                    disable_on_destroy=False,
                    disable_dependent_services=False,
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for api in REQUIRED_APIS
        ]

    def _ledger_database(self) -> pulumi.Output[str]:
        """Create the ledger database (or reuse an existing one) and its TTL policy."""
        cfg = self._cfg
        db = cfg.database
        dependencies: list[pulumi.Resource] = []
        database_name: pulumi.Output[str] = pulumi.Output.from_input(db.name)
        if db.create:
            database = gcp.firestore.Database(
                self._child_name("ledger-db"),
                gcp.firestore.DatabaseArgs(
                    project=cfg.project,
                    name=db.name,
                    location_id=db.location,
                    type="FIRESTORE_NATIVE",
                    delete_protection_state=(
                        "DELETE_PROTECTION_ENABLED"
                        if db.deletion_protection
                        else "DELETE_PROTECTION_DISABLED"
                    ),
                    point_in_time_recovery_enablement=(
                        "POINT_IN_TIME_RECOVERY_ENABLED"
                        if db.point_in_time_recovery
                        else "POINT_IN_TIME_RECOVERY_DISABLED"
                    ),
                    # `pulumi destroy` forgets the database instead of deleting it: the
                    # ledger may be shared with other stacks and a named database id
                    # cannot be reused for a while after deletion.
                    deletion_policy="ABANDON",
                ),
                opts=self._child_opts(),
            )
            dependencies.append(database)
            database_name = database.name
        ledger_ttl = self._ttl_policy("ledger-ttl", cfg.collection, database_name, dependencies)
        # Checkpoints and outputs live in the `runledger_work` subcollection of each run
        # document and carry a copy of the run's `expire_at`, so the same policy on that
        # collection group makes them expire with their run. Field operations on one
        # database are serialised by Firestore: two created at once can fail with 409
        # "Please retry, underlying data changed" (terraform-provider-google#16329; the
        # provider retries since magic-modules#9329), so the second waits for the first.
        self._ttl_policy("work-ttl", WORK_COLLECTION, database_name, [*dependencies, ledger_ttl])
        return database_name

    def _ttl_policy(
        self,
        suffix: str,
        collection: str,
        database_name: pulumi.Output[str],
        dependencies: list[pulumi.Resource],
    ) -> gcp.firestore.Field:
        """A TTL policy on `expire_at` for one collection group, with the field unindexed."""
        return gcp.firestore.Field(
            self._child_name(suffix),
            gcp.firestore.FieldArgs(
                project=self._cfg.project,
                database=database_name,
                collection=collection,
                field=TTL_FIELD,
                # Documents expire at their own `expire_at` timestamp (no offset).
                ttl_config=gcp.firestore.FieldTtlConfigArgs(),
                # An empty index config drops the single-field indexes on `expire_at`:
                # nothing queries it and indexing a monotonically increasing timestamp
                # creates write hotspots.
                index_config=gcp.firestore.FieldIndexConfigArgs(indexes=[]),
            ),
            opts=self._child_opts(dependencies),
        )

    def _account(self, role: str, description: str) -> gcp.serviceaccount.Account:
        return gcp.serviceaccount.Account(
            self._child_name(f"{role}-sa"),
            gcp.serviceaccount.AccountArgs(
                project=self._cfg.project,
                account_id=self._child_name(role),
                display_name=f"{self._prefix} {role}",
                description=description,
            ),
            opts=self._child_opts(),
        )

    def _grant_ledger_access(
        self, runtime_sa: gcp.serviceaccount.Account, database: pulumi.Output[str]
    ) -> pulumi.Resource:
        """Document read/write for the runtime account, in the ledger database only.

        Firestore has no IAM policy on a database (or collection) resource: roles are
        granted on the project. Firestore does evaluate IAM Conditions on
        `resource.name` of the database, so a project-level grant conditioned on
        `projects/P/databases/D` is the narrowest binding available. The role is a
        custom role holding only the three document permissions the handler uses,
        since every predefined Firestore role also grants listing and more.
        """
        cfg = self._cfg
        role = gcp.projects.IAMCustomRole(
            self._child_name("ledger-role"),
            gcp.projects.IAMCustomRoleArgs(
                project=cfg.project,
                role_id=self._prefix.replace("-", "_") + "_ledger_rw",
                title=f"{self._prefix} run ledger read/write",
                description="Get, create, update and delete documents; nothing else.",
                permissions=list(LEDGER_PERMISSIONS),
                stage="GA",
            ),
            opts=self._child_opts(),
        )
        return gcp.projects.IAMMember(
            self._child_name("runtime-ledger-access"),
            gcp.projects.IAMMemberArgs(
                project=cfg.project,
                role=role.name,
                member=runtime_sa.member,
                condition=gcp.projects.IAMMemberConditionArgs(
                    title=f"{self._prefix} ledger database only",
                    description="Limits the grant to the run ledger's Firestore database.",
                    expression=database.apply(
                        lambda name: f'resource.name == "projects/{cfg.project}/databases/{name}"'
                    ),
                ),
            ),
            opts=self._child_opts(),
        )

    def _build_prerequisites(
        self, handler_dir: Path, build_sa: gcp.serviceaccount.Account
    ) -> _BuildInputs:
        """Upload the handler source and give the build account what the build needs."""
        cfg = self._cfg
        files = handler_files(handler_dir)
        bucket = gcp.storage.Bucket(
            self._child_name("source"),
            gcp.storage.BucketArgs(
                project=cfg.project,
                name=f"{cfg.project}-{self._prefix}-source",
                location=cfg.region,
                uniform_bucket_level_access=True,
                public_access_prevention="enforced",
                # Only build inputs live here; they are re-uploaded from the repo.
                force_destroy=True,
            ),
            opts=self._child_opts(),
        )
        source_object = gcp.storage.BucketObject(
            self._child_name("source-archive"),
            gcp.storage.BucketObjectArgs(
                bucket=bucket.name,
                name=f"handler-{source_digest(files)[:20]}.zip",
                source=pulumi.AssetArchive(
                    {name: pulumi.FileAsset(str(path)) for name, path in files.items()}
                ),
            ),
            opts=self._child_opts(),
        )
        repository = gcp.artifactregistry.Repository(
            self._child_name("images"),
            gcp.artifactregistry.RepositoryArgs(
                project=cfg.project,
                location=cfg.region,
                repository_id=self._child_name("handler"),
                format="DOCKER",
                description="Container images built from the handler source.",
            ),
            opts=self._child_opts(),
        )
        grants: list[pulumi.Resource] = [
            # Build logs: Cloud Logging grants writing only at project level or above.
            gcp.projects.IAMMember(
                self._child_name("build-log-writer"),
                gcp.projects.IAMMemberArgs(
                    project=cfg.project, role="roles/logging.logWriter", member=build_sa.member
                ),
                opts=self._child_opts(),
            ),
            # Image push (and buildpack cache) to this stack's repository only.
            gcp.artifactregistry.RepositoryIamMember(
                self._child_name("build-image-writer"),
                gcp.artifactregistry.RepositoryIamMemberArgs(
                    project=cfg.project,
                    location=cfg.region,
                    repository=repository.repository_id,
                    role="roles/artifactregistry.writer",
                    member=build_sa.member,
                ),
                opts=self._child_opts(),
            ),
            # Read the uploaded archive in this stack's bucket.
            gcp.storage.BucketIAMMember(
                self._child_name("build-source-reader"),
                gcp.storage.BucketIAMMemberArgs(
                    bucket=bucket.name, role="roles/storage.objectViewer", member=build_sa.member
                ),
                opts=self._child_opts(),
            ),
            # Cloud Run functions copies the archive into its own per-region bucket
            # (gcf-v2-sources-NUMBER-REGION, created on first deploy, so it cannot be
            # targeted by a bucket-level grant) and the build fetches it from there.
            gcp.projects.IAMMember(
                self._child_name("build-staged-source-reader"),
                gcp.projects.IAMMemberArgs(
                    project=cfg.project,
                    role="roles/storage.objectViewer",
                    member=build_sa.member,
                    condition=gcp.projects.IAMMemberConditionArgs(
                        title=f"{self._prefix} staged function sources only",
                        description="The bucket Cloud Run functions stages sources in.",
                        expression=self._project_number.apply(
                            lambda number: (
                                'resource.name.startsWith("projects/_/buckets/'
                                f'gcf-v2-sources-{number}-{cfg.region}")'
                            )
                        ),
                    ),
                ),
                opts=self._child_opts(),
            ),
        ]
        return _BuildInputs(
            source_object=source_object,
            docker_repository=pulumi.Output.concat(
                "projects/",
                cfg.project,
                "/locations/",
                cfg.region,
                "/repositories/",
                repository.repository_id,
            ),
            grants=grants,
        )

    def _handler_function(
        self,
        runtime_sa: gcp.serviceaccount.Account,
        invoker_sa: gcp.serviceaccount.Account,
        build_sa: gcp.serviceaccount.Account,
        build: _BuildInputs,
        ledger_grant: pulumi.Resource,
    ) -> gcp.cloudfunctionsv2.Function:
        cfg = self._cfg
        environment = {
            **cfg.handler_env(),
            # Only Cloud Scheduler's identity may trigger runs, checked again in the
            # handler on the verified token Cloud Run forwards.
            "DEDUP_ALLOWED_INVOKERS": invoker_sa.email,
        }
        return gcp.cloudfunctionsv2.Function(
            self._child_name("handler"),
            gcp.cloudfunctionsv2.FunctionArgs(
                project=cfg.project,
                location=cfg.region,
                name=self._child_name("handler"),
                description="Runs each scheduled job once per scheduled time.",
                build_config=gcp.cloudfunctionsv2.FunctionBuildConfigArgs(
                    runtime=cfg.handler_runtime,
                    entry_point=ENTRY_POINT,
                    service_account=build_sa.name,
                    docker_repository=build.docker_repository,
                    source=gcp.cloudfunctionsv2.FunctionBuildConfigSourceArgs(
                        storage_source=gcp.cloudfunctionsv2.FunctionBuildConfigSourceStorageSourceArgs(
                            bucket=build.source_object.bucket,
                            object=build.source_object.name,
                        ),
                    ),
                ),
                service_config=gcp.cloudfunctionsv2.FunctionServiceConfigArgs(
                    service_account_email=runtime_sa.email,
                    timeout_seconds=cfg.request_timeout_s,
                    max_instance_count=cfg.max_instances,
                    max_instance_request_concurrency=cfg.concurrency,
                    available_cpu=cfg.cpu,
                    available_memory=cfg.memory,
                    environment_variables=environment,
                    # Cloud Scheduler calls from outside any VPC, so ingress stays open;
                    # IAM (run.invoker for the invoker account only) is the gate.
                    ingress_settings="ALLOW_ALL",
                    all_traffic_on_latest_revision=True,
                ),
            ),
            # The build needs its grants in place; the first request needs the ledger's.
            opts=self._child_opts([*build.grants, ledger_grant]),
        )

    def _grant_invocation(
        self, function: gcp.cloudfunctionsv2.Function, invoker_sa: gcp.serviceaccount.Account
    ) -> list[pulumi.Resource]:
        """Let Cloud Scheduler, and nobody else, call the service as the invoker account."""
        cfg = self._cfg
        run_invoker = gcp.cloudrunv2.ServiceIamMember(
            self._child_name("invoker-run"),
            gcp.cloudrunv2.ServiceIamMemberArgs(
                project=cfg.project,
                location=cfg.region,
                # The function's underlying Cloud Run service, fully qualified.
                name=function.service_config.apply(lambda service: service.service),
                role="roles/run.invoker",
                member=invoker_sa.member,
            ),
            opts=self._child_opts(),
        )
        # The Scheduler service agent mints the job's OIDC token as the invoker
        # account; getOpenIdToken is all it needs, on that account only.
        token_minter = gcp.serviceaccount.IAMMember(
            self._child_name("scheduler-agent-oidc"),
            gcp.serviceaccount.IAMMemberArgs(
                service_account_id=invoker_sa.name,
                role="roles/iam.serviceAccountOpenIdTokenCreator",
                member=self._project_number.apply(
                    lambda number: (
                        f"serviceAccount:service-{number}@gcp-sa-cloudscheduler.iam.gserviceaccount.com"
                    )
                ),
            ),
            opts=self._child_opts(),
        )
        return [run_invoker, token_minter]

    def _grant_target_access(
        self, runtime_sa: gcp.serviceaccount.Account
    ) -> dict[str, list[pulumi.Resource]]:
        """Let the runtime account start each job's proxy target, and only that target.

        Returns the grants per job id (jobs without a `target` get none), so each
        Scheduler job waits for its own grant: a first run without it would end in
        PermissionDenied, which the handler treats as a permanent failure.
        """
        run_job_roles: dict[str, gcp.projects.IAMCustomRole] = {}
        grants: dict[str, list[pulumi.Resource]] = {}
        for job in self._cfg.jobs:
            target = job.target
            if target is None:
                continue
            if target.kind == "workflow":
                grant = self._grant_workflow_invoker(job, target, runtime_sa)
            else:
                if target.project not in run_job_roles:
                    run_job_roles[target.project] = self._run_job_role(target.project)
                grant = self._grant_run_job(job, target, runtime_sa, run_job_roles[target.project])
            grants[job.id] = [grant]
        return grants

    def _grant_workflow_invoker(
        self, job: JobConfig, target: TargetConfig, runtime_sa: gcp.serviceaccount.Account
    ) -> pulumi.Resource:
        """`roles/workflows.invoker` for one workflow.

        Workflows has no IAM policy on a workflow (its roles are granted on the
        project at the lowest, and pulumi-gcp has no `workflows` IAM resource), so
        this is a project-level grant in the workflow's project with an IAM condition
        on the workflow's resource name. The condition also matches names under the
        workflow (its executions), in case the execution permissions are checked
        there, but never another workflow (`…/workflows/etl` does not match
        `…/workflows/etl-2`).

        Google's list of services that evaluate resource attributes in conditions
        does not name Workflows. Should Workflows not evaluate `resource.name`, the
        condition is false and the grant fails closed (the run fails with
        PermissionDenied); it never widens to every workflow in the project.
        """
        return gcp.projects.IAMMember(
            self._child_name(f"target-{job.id}"),
            gcp.projects.IAMMemberArgs(
                project=target.project,
                role=WORKFLOW_INVOKER_ROLE,
                member=runtime_sa.member,
                condition=gcp.projects.IAMMemberConditionArgs(
                    title=f"{self._prefix} invoke {target.resource_id}",
                    description=f"Scheduler job {job.id} starts this workflow only.",
                    expression=(
                        f'resource.name == "{target.name}" || '
                        f'resource.name.startsWith("{target.name}/")'
                    ),
                ),
            ),
            opts=self._child_opts(),
        )

    def _run_job_role(self, project: str) -> gcp.projects.IAMCustomRole:
        """The custom role holding `RUN_JOB_PERMISSIONS`, defined in `project`.

        A project-level custom role can only be granted on resources of its own
        project, so a target job in another project gets the role defined there.
        """
        suffix = "run-job-role" if project == self._cfg.project else f"run-job-role-{project}"
        return gcp.projects.IAMCustomRole(
            self._child_name(suffix),
            gcp.projects.IAMCustomRoleArgs(
                project=project,
                role_id=self._prefix.replace("-", "_") + "_run_job",
                title=f"{self._prefix} run a Cloud Run job with overrides",
                description="Start a job execution with environment overrides; nothing else.",
                permissions=list(RUN_JOB_PERMISSIONS),
                stage="GA",
            ),
            opts=self._child_opts(),
        )

    def _grant_run_job(
        self,
        job: JobConfig,
        target: TargetConfig,
        runtime_sa: gcp.serviceaccount.Account,
        role: gcp.projects.IAMCustomRole,
    ) -> pulumi.Resource:
        """The run-job custom role on the one Cloud Run job (Cloud Run jobs have IAM policies)."""
        return gcp.cloudrunv2.JobIamMember(
            self._child_name(f"target-{job.id}"),
            gcp.cloudrunv2.JobIamMemberArgs(
                project=target.project,
                location=target.location,
                name=target.resource_id,
                role=role.name,
                member=runtime_sa.member,
            ),
            opts=self._child_opts(),
        )

    def _scheduler_job(
        self,
        job: JobConfig,
        service_url: pulumi.Output[str],
        invoker_sa: gcp.serviceaccount.Account,
        invoker_grants: list[pulumi.Resource],
    ) -> gcp.cloudscheduler.Job:
        cfg = self._cfg
        retry = job.retry
        return gcp.cloudscheduler.Job(
            self._child_name(f"job-{job.id}"),
            gcp.cloudscheduler.JobArgs(
                project=cfg.project,
                region=cfg.region,
                # The job id is what the handler dispatches on (X-CloudScheduler-JobName),
                # so it is used verbatim rather than prefixed.
                name=job.id,
                description=job.description or None,
                schedule=job.schedule,
                time_zone=job.time_zone,
                attempt_deadline=f"{job.attempt_deadline_s}s",
                retry_config=gcp.cloudscheduler.JobRetryConfigArgs(
                    retry_count=retry.retry_count,
                    max_retry_duration=f"{retry.max_retry_duration_s}s",
                    min_backoff_duration=f"{retry.min_backoff_s}s",
                    max_backoff_duration=f"{retry.max_backoff_s}s",
                    max_doublings=retry.max_doublings,
                ),
                http_target=gcp.cloudscheduler.JobHttpTargetArgs(
                    uri=service_url,
                    http_method="POST",
                    # The API takes the body base64-encoded.
                    body=base64.b64encode(job.body.encode()).decode() if job.body else None,
                    headers={
                        cfg.project_header: cfg.project,
                        cfg.region_header: cfg.region,
                        "Content-Type": job.content_type,
                    },
                    oidc_token=gcp.cloudscheduler.JobHttpTargetOidcTokenArgs(
                        service_account_email=invoker_sa.email,
                        audience=service_url,
                    ),
                ),
            ),
            opts=self._child_opts(invoker_grants),
        )
