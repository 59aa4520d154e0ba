"""`ScheduledJobs`: one Cloud Scheduler job per configured job, the audit's, and proxy grants.

With the audit on, the runtime account may list the project's Scheduler jobs (a custom
role holding `runledger.facts.SCHEDULER_READ_PERMISSIONS` only), so the audit sees pauses
and edits made outside the stack without reading other workloads' job targets, and read
the project's log entries (`facts.PAUSE_LOG_PERMISSIONS`, a custom role), so it knows
when each pause began and ended from Scheduler's Admin Activity audit log.

Per job with a proxy `target`, the runtime account may run that one Cloud Run job
(`run.jobs.run` and `run.jobs.runWithOverrides`, on the job) or start workflows
(`roles/workflows.invoker` on the workflow's project: every workflow there, the
narrowest grant Workflows honours); jobs without one add nothing.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from dedup_schedule.config.model import JobConfig, ScheduleConfig, TargetConfig
from dedup_schedule.custom_roles import custom_role
from dedup_schedule.placement import Placement
from dedup_schedule.propagation import wait_for_grants
from runledger import facts

# What `runledger.targets.cloud_run_job_target` needs on the one job it runs: start an
# execution (run.jobs.run) with the run key and schedule time as environment overrides
# (run.jobs.runWithOverrides, which roles/run.invoker lacks; the predefined roles that
# have it, such as roles/run.developer, grant much more). The Cloud Run Admin API
# reference ("Method: namespaces.jobs.run", v1, and projects.locations.jobs.run, v2)
# names only these two: run.jobs.run on the job, run.jobs.runWithOverrides for
# `overrides`. Running needs no iam.serviceAccounts.actAs on the
# job's service account: that is checked when a job is created or updated, and env
# overrides cannot change the identity the job runs as.
RUN_JOB_PERMISSIONS = ("run.jobs.run", "run.jobs.runWithOverrides")
WORKFLOW_INVOKER_ROLE = "roles/workflows.invoker"
# The API `runledger.targets.workflow_target` calls: its client
# (google.cloud.workflows.executions_v1.ExecutionsClient) talks to
# workflowexecutions.googleapis.com, which the stack's project (where the runtime
# account's calls are accounted) and the workflow's project must have enabled. Cloud
# Run job targets call run.googleapis.com, which the stack enables anyway.
WORKFLOW_EXECUTIONS_API = "workflowexecutions.googleapis.com"


@dataclass(frozen=True)
class ScheduledJobsArgs:
    """Inputs of `ScheduledJobs`.

    config: the validated stack config (its jobs, project, region and header names).
    service_url: the handler's URL, which every job calls and uses as OIDC audience.
    invoker_email: the account each job's OIDC token is minted for.
    runtime_member: IAM member of the account the handler runs as (proxy-target grants).
    invocation_grants: the grants a job's first call needs in place.
    region: the region whose Scheduler holds these jobs, calling that region's handler
        ("": the stack's first). An added region's jobs are the same jobs under the same
        ids; the project-wide grants (proxy targets, the audit's reads) are the first's.
    """

    placement: Placement
    config: ScheduleConfig
    service_url: pulumi.Output[str]
    invoker_email: pulumi.Input[str]
    runtime_member: pulumi.Input[str]
    invocation_grants: Sequence[pulumi.Resource]
    region: str = ""

    @property
    def location(self) -> str:
        return self.region or self.config.region

    @property
    def first_region(self) -> bool:
        return self.location == self.config.region


class ScheduledJobs(pulumi.ComponentResource):
    """The Cloud Scheduler jobs, each calling the handler with OIDC and its proxy target grant."""

    job_names: pulumi.Output[list[str]]

    def __init__(
        self, name: str, args: ScheduledJobsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("scheduler-dedup:index:ScheduledJobs", name, None, opts)
        first = args.first_region
        target_grants = _grant_target_access(self, args) if first else {}
        target_apis = _enable_target_apis(self, args) if first else []
        # A job's first delivery needs the invoker's run.invoker and its target's grant
        # in effect, not merely written (dedup_schedule.propagation).
        grants_applied = wait_for_grants(
            self,
            args.placement,
            "invocation-grants-wait",
            [*args.invocation_grants, *(g for grants in target_grants.values() for g in grants)],
        )
        jobs = [
            _scheduler_job(
                self,
                args,
                job,
                [grants_applied, *target_grants.get(job.id, []), *target_apis],
            )
            # The configured jobs and the stack's audit (`ScheduleConfig.audit_job`), which
            # calls the same handler with the same token and headers under its reserved id.
            for job in args.config.scheduler_jobs
        ]
        if args.config.audit_job is not None and first:
            _grant_audit_reads(self, args)
        self.job_names = pulumi.Output.all(*[job.name for job in jobs])
        self.register_outputs({"jobNames": self.job_names})


def _grant_target_access(
    parent: ScheduledJobs, args: ScheduledJobsArgs
) -> dict[str, list[pulumi.Resource]]:
    """Let the runtime account start each job's proxy target, and only that target.

    Returns the grants per job id (jobs without a `target` get none). The jobs
    wait for them: a run that meets PermissionDenied is released and only a
    Scheduler retry would run it again.
    """
    run_job_roles: dict[str, gcp.projects.IAMCustomRole] = {}
    # One grant per workflow project and per Cloud Run job: two resources managing the
    # same binding member would remove it for both when either is deleted.
    workflow_grants: dict[str, pulumi.Resource] = {}
    run_job_grants: dict[str, pulumi.Resource] = {}
    grants: dict[str, list[pulumi.Resource]] = {}
    for job in args.config.jobs:
        target = job.target
        if target is None:
            continue
        if target.kind == "workflow":
            if target.project not in workflow_grants:
                workflow_grants[target.project] = _grant_workflow_invoker(
                    parent, args, target.project
                )
            grant = workflow_grants[target.project]
        else:
            if target.project not in run_job_roles:
                run_job_roles[target.project] = _run_job_role(parent, args, target.project)
            if target.name not in run_job_grants:
                run_job_grants[target.name] = _grant_run_job(
                    parent, args, job, target, run_job_roles[target.project]
                )
            grant = run_job_grants[target.name]
        grants[job.id] = [grant]
    return grants


def _grant_workflow_invoker(
    parent: ScheduledJobs, args: ScheduledJobsArgs, project: str
) -> pulumi.Resource:
    """`roles/workflows.invoker` on the workflow's project, without a condition.

    Workflows roles can be granted no lower than the project ("Workflows roles and
    permissions": lowest-level resource, Project), and Workflows is not among the
    services that recognise resource attributes in IAM Conditions ("Resource
    attributes for IAM Conditions": "Other services and resource types do not
    recognize resource attributes"), so a `resource.name` condition would never
    match and every run would meet PermissionDenied. The grant therefore lets the
    runtime account start any workflow in that project; that scope is stated in the
    docs and in the policy pack's allowed roles.
    """
    place = args.placement
    return gcp.projects.IAMMember(
        place.name(f"workflow-invoker-{project}"),
        gcp.projects.IAMMemberArgs(
            project=project, role=WORKFLOW_INVOKER_ROLE, member=args.runtime_member
        ),
        opts=place.opts(parent),
    )


def _grant_audit_reads(parent: ScheduledJobs, args: ScheduledJobsArgs) -> None:
    """The audit's two reads, each a custom role holding only what it calls, on the project.

    Scheduler's listing (`facts.SCHEDULER_READ_PERMISSIONS`), not
    roles/cloudscheduler.viewer: that role also reads every job's target
    (cloudscheduler.jobs.fullView), other workloads' headers and bodies included;
    Scheduler permissions are granted no lower than the project ("Cloud Scheduler
    roles and permissions": lowest-level resource, Project).

    Scheduler's Admin Activity log (`facts.PAUSE_LOG_PERMISSIONS`):
    `runledger.audit.pause_log` calls entries.list on the project, which needs
    `logging.logEntries.list` (`logging.privateLogEntries.list` is for Data Access
    logs); every predefined Logging role that holds it grants more
    (roles/logging.viewer also lists logs, sinks, buckets and views), and log
    entries have no narrower IAM resource than the project here.

    Nothing waits for either grant: until the listing applies the audit falls back
    to DEDUP_SCHEDULES; until the log read does, it reports missed times of unknown
    state and catches none up.
    """
    reads = (
        (
            "scheduler-read-role",
            "scheduler-read",
            "scheduler_read",
            "list Cloud Scheduler jobs",
            "List the project's Scheduler jobs (state and schedule); nothing else.",
            facts.SCHEDULER_READ_PERMISSIONS,
        ),
        (
            "pause-log-role",
            "pause-log-read",
            "pause_log_read",
            "read Cloud Scheduler's audit log entries",
            "List log entries (the audit reads PauseJob and ResumeJob); nothing else.",
            facts.PAUSE_LOG_PERMISSIONS,
        ),
    )
    place, project = args.placement, args.config.project
    for role_name, grant_name, role_id, title, description, permissions in reads:
        role = custom_role(
            place, parent, role_name, project, role_id, title, description, permissions
        )
        gcp.projects.IAMMember(
            place.name(grant_name),
            gcp.projects.IAMMemberArgs(project=project, role=role.name, member=args.runtime_member),
            opts=place.opts(parent),
        )


def _enable_target_apis(parent: ScheduledJobs, args: ScheduledJobsArgs) -> list[pulumi.Resource]:
    """`WORKFLOW_EXECUTIONS_API` in the stack's project and each workflow's, if any job needs it.

    Left enabled on destroy, like the stack's other APIs.
    """
    cfg, place = args.config, args.placement
    workflow_projects = sorted(
        {job.target.project for job in cfg.jobs if job.target and job.target.kind == "workflow"}
    )
    if not workflow_projects:
        return []
    projects = [cfg.project, *(p for p in workflow_projects if p != cfg.project)]
    return [
        gcp.projects.Service(
            place.name("api-workflowexecutions")
            if project == cfg.project
            else place.name(f"api-workflowexecutions-{project}"),
            gcp.projects.ServiceArgs(
                project=project,
                service=WORKFLOW_EXECUTIONS_API,
                disable_on_destroy=False,
                disable_dependent_services=False,
            ),
            opts=place.opts(parent),
        )
        for project in projects
    ]


def _run_job_role(
    parent: ScheduledJobs, args: ScheduledJobsArgs, project: str
) -> gcp.projects.IAMCustomRole:
    """The custom role holding `RUN_JOB_PERMISSIONS`, defined in `project`.

    A project-level custom role can only be granted on resources of its own
    project, so a target job in another project gets the role defined there.
    """
    place = args.placement
    suffix = "run-job-role" if project == args.config.project else f"run-job-role-{project}"
    return custom_role(
        place,
        parent,
        suffix,
        project,
        "run_job",
        "run a Cloud Run job with overrides",
        "Start a job execution with environment overrides; nothing else.",
        RUN_JOB_PERMISSIONS,
    )


def _grant_run_job(
    parent: ScheduledJobs,
    args: ScheduledJobsArgs,
    job: JobConfig,
    target: TargetConfig,
    role: gcp.projects.IAMCustomRole,
) -> pulumi.Resource:
    """The run-job custom role on the one Cloud Run job (Cloud Run jobs have IAM policies)."""
    return gcp.cloudrunv2.JobIamMember(
        args.placement.name(f"target-{job.id}"),
        gcp.cloudrunv2.JobIamMemberArgs(
            project=target.project,
            location=target.location,
            name=target.resource_id,
            role=role.name,
            member=args.runtime_member,
        ),
        opts=args.placement.opts(parent),
    )


# HttpTarget.headers: Content-Type "is set to application/octet-stream" by default. The
# provider drops exactly that value from what it reads back
# (flattenCloudSchedulerJobHttpTargetHeaders in
# google/services/cloudscheduler/resource_cloud_scheduler_job.go deletes a Content-Type of
# "application/octet-stream"), so sending it would show a diff on every `pulumi up`:
# the default is left to Scheduler instead, which delivers the same header.
SCHEDULER_DEFAULT_CONTENT_TYPE = "application/octet-stream"


def _content_type(content_type: str) -> dict[str, str]:
    """The job's Content-Type header, or none where Scheduler's default is the same."""
    if content_type.strip().lower() == SCHEDULER_DEFAULT_CONTENT_TYPE:
        return {}
    return {"Content-Type": content_type}


def _scheduler_job(
    parent: ScheduledJobs,
    args: ScheduledJobsArgs,
    job: JobConfig,
    grants: list[pulumi.Resource],
) -> gcp.cloudscheduler.Job:
    cfg = args.config
    retry = job.retry
    return gcp.cloudscheduler.Job(
        args.placement.name(f"job-{job.id}"),
        gcp.cloudscheduler.JobArgs(
            project=cfg.project,
            region=args.location,
            # The job id is what the handler dispatches on (X-CloudScheduler-JobName),
            # so it is used verbatim rather than prefixed.
            name=job.id,
            description=job.description or None,
            # Always sent, false too: the provider's `paused` is Optional+Computed and it
            # calls pause/resume only when the value changes, so an unset value would
            # leave a job the stack once paused paused (terraform-provider-google
            # google/services/cloudscheduler/resource_cloud_scheduler_job.go: schema
            # `"paused"` Optional+Computed; the update calls `:pause`/`:resume` under
            # `if d.HasChange("paused")`; the encoder deletes `paused` from the body).
            paused=job.paused,
            schedule=job.schedule,
            time_zone=job.time_zone,
            attempt_deadline=f"{job.attempt_deadline_s}s",
            # The provider sends a retry field only when it is not the zero value
            # (expandCloudSchedulerJobRetryConfig, `!tpgresource.IsEmptyValue(val)`):
            # the config refuses maxDoublings 0 for that (facts.DROPPED_MAX_DOUBLINGS);
            # retryCount 0 is Scheduler's default; the durations go as strings, "0s" too.
            retry_config=gcp.cloudscheduler.JobRetryConfigArgs(
                retry_count=retry.retry_count,
                max_retry_duration=f"{retry.max_retry_duration_s}s",
                min_backoff_duration=f"{retry.min_backoff_s}s",
                max_backoff_duration=f"{retry.max_backoff_s}s",
                max_doublings=retry.max_doublings,
            ),
            http_target=gcp.cloudscheduler.JobHttpTargetArgs(
                uri=args.service_url,
                http_method="POST",
                # The API takes the body base64-encoded.
                body=base64.b64encode(job.body.encode()).decode() if job.body else None,
                headers={
                    cfg.project_header: cfg.project,
                    cfg.region_header: args.location,
                    **_content_type(job.content_type),
                },
                oidc_token=gcp.cloudscheduler.JobHttpTargetOidcTokenArgs(
                    service_account_email=args.invoker_email,
                    audience=args.service_url,
                ),
            ),
        ),
        opts=args.placement.opts(parent, grants),
    )
