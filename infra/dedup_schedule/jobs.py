"""`ScheduledJobs`: one Cloud Scheduler job per configured job, the audit's, and proxy grants.

Per job with a proxy `target`, the runtime account may start that one workflow
(`roles/workflows.invoker`) or run that one Cloud Run job (`run.jobs.run` and
`run.jobs.runWithOverrides`); jobs without one add nothing.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from dedup_schedule.config import JobConfig, ScheduleConfig, TargetConfig
from dedup_schedule.placement import Placement

# What `runledger.targets.cloud_run_job_target` needs on the one job it runs: start an
# execution (run.jobs.run) with the run key and schedule time as environment overrides
# (run.jobs.runWithOverrides, which roles/run.invoker lacks; the predefined roles that
# have it, such as roles/run.developer, grant much more). Google's docs name only
# these two permissions for jobs.run. Running needs no iam.serviceAccounts.actAs on the
# job's service account: that is checked when a job is created or updated, and env
# overrides cannot change the identity the job runs as.
RUN_JOB_PERMISSIONS = ("run.jobs.run", "run.jobs.runWithOverrides")
WORKFLOW_INVOKER_ROLE = "roles/workflows.invoker"


@dataclass(frozen=True)
class ScheduledJobsArgs:
    """Inputs of `ScheduledJobs`.

    config: the validated stack config (its jobs, project, region and header names).
    service_url: the handler's URL, which every job calls and uses as OIDC audience.
    invoker_email: the account each job's OIDC token is minted for.
    runtime_member: IAM member of the account the handler runs as (proxy-target grants).
    invocation_grants: the grants a job's first call needs in place.
    """

    placement: Placement
    config: ScheduleConfig
    service_url: pulumi.Output[str]
    invoker_email: pulumi.Input[str]
    runtime_member: pulumi.Input[str]
    invocation_grants: Sequence[pulumi.Resource]


class ScheduledJobs(pulumi.ComponentResource):
    """The Cloud Scheduler jobs, each calling the handler with OIDC and its proxy target grant."""

    job_names: pulumi.Output[list[str]]

    def __init__(
        self, name: str, args: ScheduledJobsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("scheduler-dedup:index:ScheduledJobs", name, None, opts)
        target_grants = _grant_target_access(self, args)
        jobs = [
            _scheduler_job(
                self, args, job, [*args.invocation_grants, *target_grants.get(job.id, [])]
            )
            # The configured jobs and the stack's audit (`ScheduleConfig.audit_job`), which
            # calls the same handler with the same token and headers under its reserved id.
            for job in args.config.scheduler_jobs
        ]
        self.job_names = pulumi.Output.all(*[job.name for job in jobs])
        self.register_outputs({"jobNames": self.job_names})


def _grant_target_access(
    parent: ScheduledJobs, args: ScheduledJobsArgs
) -> dict[str, list[pulumi.Resource]]:
    """Let the runtime account start each job's proxy target, and only that target.

    Returns the grants per job id (jobs without a `target` get none), so each
    Scheduler job waits for its own grant: a first run without it would end in
    PermissionDenied, which the handler treats as a permanent failure.
    """
    run_job_roles: dict[str, gcp.projects.IAMCustomRole] = {}
    grants: dict[str, list[pulumi.Resource]] = {}
    for job in args.config.jobs:
        target = job.target
        if target is None:
            continue
        if target.kind == "workflow":
            grant = _grant_workflow_invoker(parent, args, job, target)
        else:
            if target.project not in run_job_roles:
                run_job_roles[target.project] = _run_job_role(parent, args, target.project)
            grant = _grant_run_job(parent, args, job, target, run_job_roles[target.project])
        grants[job.id] = [grant]
    return grants


def _grant_workflow_invoker(
    parent: ScheduledJobs, args: ScheduledJobsArgs, job: JobConfig, target: TargetConfig
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
    place = args.placement
    return gcp.projects.IAMMember(
        place.name(f"target-{job.id}"),
        gcp.projects.IAMMemberArgs(
            project=target.project,
            role=WORKFLOW_INVOKER_ROLE,
            member=args.runtime_member,
            condition=gcp.projects.IAMMemberConditionArgs(
                title=f"{place.prefix} invoke {target.resource_id}",
                description=f"Scheduler job {job.id} starts this workflow only.",
                expression=(
                    f'resource.name == "{target.name}" || '
                    f'resource.name.startsWith("{target.name}/")'
                ),
            ),
        ),
        opts=place.opts(parent),
    )


def _run_job_role(
    parent: ScheduledJobs, args: ScheduledJobsArgs, project: str
) -> gcp.projects.IAMCustomRole:
    """The custom role holding `RUN_JOB_PERMISSIONS`, defined in `project`.

    A project-level custom role can only be granted on resources of its own
    project, so a target job in another project gets the role defined there.
    """
    place = args.placement
    suffix = "run-job-role" if project == args.config.project else f"run-job-role-{project}"
    return gcp.projects.IAMCustomRole(
        place.name(suffix),
        gcp.projects.IAMCustomRoleArgs(
            project=project,
            role_id=place.prefix.replace("-", "_") + "_run_job",
            title=f"{place.prefix} run a Cloud Run job with overrides",
            description="Start a job execution with environment overrides; nothing else.",
            permissions=list(RUN_JOB_PERMISSIONS),
            stage="GA",
        ),
        opts=place.opts(parent),
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
                uri=args.service_url,
                http_method="POST",
                # The API takes the body base64-encoded.
                body=base64.b64encode(job.body.encode()).decode() if job.body else None,
                headers={
                    cfg.project_header: cfg.project,
                    cfg.region_header: cfg.region,
                    "Content-Type": job.content_type,
                },
                oidc_token=gcp.cloudscheduler.JobHttpTargetOidcTokenArgs(
                    service_account_email=args.invoker_email,
                    audience=args.service_url,
                ),
            ),
        ),
        opts=args.placement.opts(parent, grants),
    )
