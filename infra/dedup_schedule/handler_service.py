"""`HandlerService`: the handler built from source as a Cloud Run function, and who may call it.

* build account: writes the image to this stack's own repository, reads the source,
  writes build logs;
* invoker account: `roles/run.invoker` on this one Cloud Run service, nothing else.

Cloud Scheduler's service agent needs no grant here: it mints the jobs' OIDC tokens
for the invoker account through its own `roles/cloudscheduler.serviceAgent`, which
must simply not be revoked ("Use authentication with HTTP targets").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_gcp as gcp

from dedup_schedule.config.model import ScheduleConfig
from dedup_schedule.placement import Placement
from dedup_schedule.project_setup import service_account
from dedup_schedule.propagation import wait_for_grants
from dedup_schedule.source import REQUIREMENTS, handler_archive
from runledger.config import ALLOWED_INVOKER_IDS_ENV, ALLOWED_INVOKERS_ENV

ENTRY_POINT = "handle_scheduled_job"
# The image repository's cleanup policy: the newest IMAGES_KEPT versions stay, older
# ones are deleted once older than IMAGE_MAX_AGE.
IMAGES_KEPT = 5
IMAGE_MAX_AGE = f"{30 * 24 * 3600}s"
# `ingress` stack config value -> Cloud Run functions ServiceConfig.ingressSettings.
INGRESS_SETTINGS = {
    "internal-only": "ALLOW_INTERNAL_ONLY",
    "internal-and-gclb": "ALLOW_INTERNAL_AND_GCLB",
    "all": "ALLOW_ALL",
}


@dataclass(frozen=True)
class SharedBuild:
    """What every region's function is built from: one build account, one source archive.

    The first region's `HandlerService` creates them; each added region's reuses them.
    """

    account: gcp.serviceaccount.Account
    bucket: gcp.storage.Bucket
    source_object: gcp.storage.BucketObject


@dataclass(frozen=True)
class HandlerServiceArgs:
    """Inputs of `HandlerService`.

    config: the validated stack config (function settings and the handler's DEDUP_* env).
    handler_dir: the handler's source directory on disk, packaged on every run.
    runtime_email: the account the function runs as.
    invoker: the account Cloud Scheduler calls the function as; the only one allowed to.
    ledger_access: the runtime account's ledger grant, in place before the first request.
    region: the region of this function ("": the stack's first, `gcp:region`).
    shared: the first region's build account and source (None: this is the first region).
    """

    placement: Placement
    config: ScheduleConfig
    handler_dir: Path
    runtime_email: pulumi.Input[str]
    invoker: gcp.serviceaccount.Account
    ledger_access: pulumi.Resource
    region: str = ""
    shared: SharedBuild | None = None

    @property
    def location(self) -> str:
        return self.region or self.config.region


class HandlerService(pulumi.ComponentResource):
    """The deduplicating handler as a private Cloud Run function, invoked as the invoker account."""

    service_url: pulumi.Output[str]
    build_service_account: pulumi.Output[str]
    invocation_grants: list[pulumi.Resource]
    shared: SharedBuild

    def __init__(
        self, name: str, args: HandlerServiceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("scheduler-dedup:index:HandlerService", name, None, opts)
        cfg = args.config
        # Service agents are named after the project number, which config does not hold.
        project_number = gcp.organizations.get_project_output(
            project_id=cfg.project,
            opts=pulumi.InvokeOutputOptions(parent=self, depends_on=list(args.placement.apis)),
        ).number
        place = args.placement
        shared = args.shared or _shared_build(self, args)
        build_account, source_object = shared.account, shared.source_object
        repository = _image_repository(self, args)
        build_grants = _grant_build(self, args, shared, repository, project_number)
        # The build needs its grants in effect, the first request the ledger's.
        grants_applied = wait_for_grants(
            self, place, "build-grants-wait", [*build_grants, args.ledger_access]
        )
        function = _function(self, args, build_account, source_object, repository, [grants_applied])
        self.service_url = function.service_config.apply(lambda service: service.uri)
        self.build_service_account = build_account.email
        self.shared = shared
        self.invocation_grants = _grant_invocation(self, args, function)
        self.register_outputs(
            {"serviceUrl": self.service_url, "buildServiceAccount": self.build_service_account}
        )


def _shared_build(parent: HandlerService, args: HandlerServiceArgs) -> SharedBuild:
    """The first region's build account and source archive, which every region builds from."""
    place = args.placement
    account = service_account(
        place.prefix,
        args.config.project,
        "build",
        "Builds the handler's container image",
        place.opts(parent),
    )
    return SharedBuild(account, *_upload_source(parent, args))


def _upload_source(
    parent: HandlerService, args: HandlerServiceArgs
) -> tuple[gcp.storage.Bucket, gcp.storage.BucketObject]:
    """The stack's source bucket and the handler's archive in it, named by content hash.

    The archive holds the team's handler files and the installed runledger
    (`dedup_schedule.source`), so the build needs nothing but the package index.
    """
    cfg, place = args.config, args.placement
    archive = handler_archive(args.handler_dir)
    bucket = gcp.storage.Bucket(
        place.name("source"),
        gcp.storage.BucketArgs(
            project=cfg.project,
            name=f"{cfg.project}-{place.prefix}-source",
            location=cfg.region,
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            # Only build inputs live here; they are re-uploaded from the repo.
            force_destroy=True,
        ),
        opts=place.opts(parent),
    )
    source_object = gcp.storage.BucketObject(
        place.name("source-archive"),
        gcp.storage.BucketObjectArgs(
            bucket=bucket.name,
            name=f"handler-{archive.digest()[:20]}.zip",
            source=pulumi.AssetArchive(
                {
                    **{name: pulumi.FileAsset(str(path)) for name, path in archive.files.items()},
                    REQUIREMENTS: pulumi.StringAsset(archive.requirements),
                }
            ),
        ),
        opts=place.opts(parent),
    )
    return bucket, source_object


def _image_repository(
    parent: HandlerService, args: HandlerServiceArgs
) -> gcp.artifactregistry.Repository:
    cfg, place = args.config, args.placement
    return gcp.artifactregistry.Repository(
        place.name("images"),
        gcp.artifactregistry.RepositoryArgs(
            project=cfg.project,
            location=args.location,
            repository_id=place.physical("handler"),
            format="DOCKER",
            description="Container images built from the handler source.",
            # Every handler change builds a new image; without a policy the repository
            # only grows. Keep the newest few (rollback targets, and the image the
            # live revision runs, which is always among the newest) and delete the
            # rest once they are a month old. KEEP wins over DELETE for a version both
            # match (Artifact Registry "Cleanup policy overview").
            cleanup_policies=[
                gcp.artifactregistry.RepositoryCleanupPolicyArgs(
                    id="keep-newest",
                    action="KEEP",
                    most_recent_versions=(
                        gcp.artifactregistry.RepositoryCleanupPolicyMostRecentVersionsArgs(
                            keep_count=IMAGES_KEPT
                        )
                    ),
                ),
                gcp.artifactregistry.RepositoryCleanupPolicyArgs(
                    id="delete-old",
                    action="DELETE",
                    condition=gcp.artifactregistry.RepositoryCleanupPolicyConditionArgs(
                        tag_state="ANY", older_than=IMAGE_MAX_AGE
                    ),
                ),
            ],
            cleanup_policy_dry_run=False,
        ),
        opts=place.opts(parent),
    )


def _grant_build(
    parent: HandlerService,
    args: HandlerServiceArgs,
    shared: SharedBuild,
    repository: gcp.artifactregistry.Repository,
    project_number: pulumi.Output[str],
) -> list[pulumi.Resource]:
    """What the build account needs, each on the narrowest resource that works.

    An added region's function needs only its own region's grants (its repository,
    its staging bucket): the project's and the source bucket's are the first region's.
    """
    cfg, place = args.config, args.placement
    region = args.location
    build_member = shared.account.member
    regional = [
        # Image push (and buildpack cache) to this stack's repository only.
        gcp.artifactregistry.RepositoryIamMember(
            place.name("build-image-writer"),
            gcp.artifactregistry.RepositoryIamMemberArgs(
                project=cfg.project,
                location=region,
                repository=repository.repository_id,
                role="roles/artifactregistry.writer",
                member=build_member,
            ),
            opts=place.opts(parent),
        ),
        # Cloud Run functions copies the archive into its own per-region bucket
        # (gcf-v2-sources-NUMBER-REGION, created on first deploy, so it cannot be
        # targeted by a bucket-level grant) and the build works from there. Google's
        # "Configure the build service account" (Cloud Run functions) asks for Storage
        # Object Admin "for retrieving the function source from the Cloud Storage
        # bucket"; it is granted on that one bucket only, by the condition.
        gcp.projects.IAMMember(
            place.name("build-staged-source-reader"),
            gcp.projects.IAMMemberArgs(
                project=cfg.project,
                role="roles/storage.objectAdmin",
                member=build_member,
                condition=gcp.projects.IAMMemberConditionArgs(
                    title=f"{place.prefix} staged function sources only",
                    description="The bucket Cloud Run functions stages sources in.",
                    expression=project_number.apply(
                        lambda number: (
                            'resource.name.startsWith("projects/_/buckets/'
                            f'gcf-v2-sources-{number}-{region}")'
                        )
                    ),
                ),
            ),
            opts=place.opts(parent),
        ),
    ]
    if args.shared is not None:
        return regional
    return [
        # Build logs: Cloud Logging grants writing only at project level or above.
        gcp.projects.IAMMember(
            place.name("build-log-writer"),
            gcp.projects.IAMMemberArgs(
                project=cfg.project, role="roles/logging.logWriter", member=build_member
            ),
            opts=place.opts(parent),
        ),
        # Read the uploaded archive in this stack's bucket.
        gcp.storage.BucketIAMMember(
            place.name("build-source-reader"),
            gcp.storage.BucketIAMMemberArgs(
                bucket=shared.bucket.name, role="roles/storage.objectViewer", member=build_member
            ),
            opts=place.opts(parent),
        ),
        *regional,
    ]


def _function(
    parent: HandlerService,
    args: HandlerServiceArgs,
    build_account: gcp.serviceaccount.Account,
    source_object: gcp.storage.BucketObject,
    repository: gcp.artifactregistry.Repository,
    depends_on: list[pulumi.Resource],
) -> gcp.cloudfunctionsv2.Function:
    cfg, place = args.config, args.placement
    environment = {
        **cfg.handler_env(args.location),
        # IAM admits every holder of run.invoker (the project's owners and editors
        # too); the handler runs work only for the jobs' invoker account, read from
        # the token Cloud Run verified: its `email` claim, or its `sub` claim, which
        # is the account's unique id ("The unique id of the service account",
        # `serviceaccount.Account.unique_id`) and is in every Google ID token.
        ALLOWED_INVOKERS_ENV: args.invoker.email,
        ALLOWED_INVOKER_IDS_ENV: args.invoker.unique_id,
        # functions-framework serves on as many threads as THREADS says (default four
        # per CPU it sees): one per request Cloud Run may send the instance at once.
        "THREADS": str(cfg.concurrency),
    }
    return gcp.cloudfunctionsv2.Function(
        place.name("handler"),
        gcp.cloudfunctionsv2.FunctionArgs(
            project=cfg.project,
            location=args.location,
            # The same name in every region: the monitoring's log filter names it once.
            name=place.physical("handler"),
            description="Runs each scheduled job once per scheduled time.",
            build_config=gcp.cloudfunctionsv2.FunctionBuildConfigArgs(
                runtime=cfg.handler_runtime,
                entry_point=ENTRY_POINT,
                service_account=build_account.name,
                docker_repository=pulumi.Output.concat(
                    "projects/",
                    cfg.project,
                    "/locations/",
                    args.location,
                    "/repositories/",
                    repository.repository_id,
                ),
                source=gcp.cloudfunctionsv2.FunctionBuildConfigSourceArgs(
                    storage_source=gcp.cloudfunctionsv2.FunctionBuildConfigSourceStorageSourceArgs(
                        bucket=source_object.bucket,
                        object=source_object.name,
                    ),
                ),
            ),
            service_config=gcp.cloudfunctionsv2.FunctionServiceConfigArgs(
                service_account_email=args.runtime_email,
                timeout_seconds=cfg.request_timeout_s,
                max_instance_count=cfg.max_instances,
                max_instance_request_concurrency=cfg.concurrency,
                available_cpu=cfg.cpu,
                available_memory=cfg.memory,
                environment_variables=environment,
                # Internal-only by default. "Restrict network ingress for Cloud Run" counts
                # Cloud Scheduler (with Cloud Tasks, Eventarc, Pub/Sub, Workflows and
                # BigQuery) as internal on two conditions: it is in the same project or
                # VPC Service Controls perimeter, and it calls the service's default
                # run.app URL, not a custom domain. The jobs (scheduler_jobs.py) are in this project
                # and call `service_config.uri`, the run.app URL; the internet cannot
                # reach the service at all. IAM (run.invoker) and the handler's invoker
                # check still apply on top.
                ingress_settings=INGRESS_SETTINGS[cfg.ingress],
                all_traffic_on_latest_revision=True,
            ),
        ),
        opts=place.opts(parent, depends_on),
    )


def _grant_invocation(
    parent: HandlerService, args: HandlerServiceArgs, function: gcp.cloudfunctionsv2.Function
) -> list[pulumi.Resource]:
    """`roles/run.invoker` on the function's Cloud Run service for the invoker account only.

    That is all an OIDC-authenticated Scheduler job needs: the job's account holds the
    receiving service's invoker role, and the Scheduler service agent mints the token
    with its own role ("Use authentication with HTTP targets"). No grant to the agent
    is made: on a new project it may not exist yet when this runs.
    """
    cfg, place = args.config, args.placement
    run_invoker = gcp.cloudrunv2.ServiceIamMember(
        place.name("invoker-run"),
        gcp.cloudrunv2.ServiceIamMemberArgs(
            project=cfg.project,
            location=args.location,
            # The function's underlying Cloud Run service, fully qualified.
            name=function.service_config.apply(lambda service: service.service),
            role="roles/run.invoker",
            member=args.invoker.member,
        ),
        opts=place.opts(parent),
    )
    return [run_invoker]
