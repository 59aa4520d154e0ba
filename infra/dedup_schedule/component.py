"""`DedupSchedule`: the handler, its ledger and its Cloud Scheduler jobs as one component.

Everything the schedule needs is a descendant of one `ComponentResource`, named
from `ScheduleConfig.name_prefix`, so another Pulumi program can reuse the whole
unit by constructing `DedupSchedule` with its own config. It enables the APIs and
creates the runtime and invoker accounts itself, and composes one child component
per concern, each taking its inputs explicitly:

* `RunLedger` (`ledger.py`): the Firestore database, TTL policies, ledger role and grant;
* `HandlerService` (`handler_service.py`): source, image repository, build account
  and grants, the Cloud Run function, and who may invoke it;
* `ScheduledJobs` (`scheduler_jobs.py`): the Scheduler jobs (with the audit's) and their proxy
  targets' grants;
* `RunMonitoring` (`monitoring/`: metrics, alerts, channels, dashboard): log-based metrics,
  alert policies and notification channels, and a dashboard.

Security model, each grant on the narrowest resource that works:

* runtime account: only document get/create/update, in the one ledger database;
  plus, per job with a proxy `target`, the right to run that one Cloud Run job or to
  start workflows in the workflow's project (Workflows allows nothing narrower); with
  the audit on, a custom role holding only cloudscheduler.jobs.list on the project
  (Scheduler grants go no lower) so the audit lists the jobs' live state; with
  `deadLetterTopic`, roles/pubsub.publisher on that one topic (`dead_letters.py`);
* invoker account: `roles/run.invoker` on this one Cloud Run service, nothing else;
* Cloud Scheduler service agent: nothing (its own role mints the OIDC tokens);
* build account: writes the image to this stack's own repository, reads the source,
  writes build logs.

No primitive roles are used and no resource runs as the default compute account.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi

from dedup_schedule.config.model import ScheduleConfig
from dedup_schedule.dead_letters import dead_letter_topic
from dedup_schedule.handler_service import HandlerService, HandlerServiceArgs
from dedup_schedule.ledger import RunLedger, RunLedgerArgs
from dedup_schedule.monitoring.component import RunMonitoring, RunMonitoringArgs
from dedup_schedule.placement import Placement
from dedup_schedule.project_setup import enable_apis, service_account
from dedup_schedule.scheduler_jobs import ScheduledJobs, ScheduledJobsArgs


@dataclass(frozen=True)
class DedupScheduleArgs:
    """Inputs of `DedupSchedule`.

    config: the validated stack config (see `dedup_schedule.config.parser.parse_config`).
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
    dashboard: pulumi.Output[str]
    force_run_commands: pulumi.Output[dict[str, str]]
    # Every region's handler URL by region, with several regions (None: one region).
    region_service_urls: pulumi.Output[dict[str, str]] | None

    def __init__(
        self,
        name: str,
        args: DedupScheduleArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("scheduler-dedup:index:DedupSchedule", name, None, opts)
        cfg = args.config
        prefix = cfg.name_prefix
        apis = enable_apis(prefix, cfg.project, self)
        own = pulumi.ResourceOptions(parent=self, depends_on=list(apis))
        runtime = service_account(
            prefix, cfg.project, "runtime", "Runs the deduplicating Cloud Scheduler handler", own
        )
        invoker = service_account(
            prefix, cfg.project, "invoker", "Identity Cloud Scheduler calls the handler as", own
        )
        # The child components' resources were direct children of this component
        # before it was split by concern; `Placement` aliases them to here.
        place = Placement(prefix=prefix, apis=apis, moved_from=self)
        children = pulumi.ResourceOptions(parent=self)
        ledger = RunLedger(
            f"{prefix}-ledger",
            RunLedgerArgs(
                placement=place,
                project=cfg.project,
                collection=cfg.collection,
                database=cfg.database,
                runtime_member=runtime.member,
            ),
            children,
        )
        handlers: dict[str, HandlerService] = {}
        regional_jobs: dict[str, ScheduledJobs] = {}
        for region in cfg.regions:
            suffix = cfg.region_suffix(region)
            first = region == cfg.region
            here = place.in_region(suffix)
            handler = HandlerService(
                f"{prefix}-service{suffix}",
                HandlerServiceArgs(
                    placement=here,
                    config=cfg,
                    handler_dir=args.handler_dir,
                    runtime_email=runtime.email,
                    invoker=invoker,
                    ledger_access=ledger.access_grant,
                    region=region,
                    shared=None if first else handlers[cfg.region].shared,
                ),
                children,
            )
            handlers[region] = handler
            # An added region's jobs wait for the first region's project-wide grants.
            after_first = [] if first else [regional_jobs[cfg.region]]
            regional_jobs[region] = ScheduledJobs(
                f"{prefix}-jobs{suffix}",
                ScheduledJobsArgs(
                    placement=here,
                    config=cfg,
                    service_url=handler.service_url,
                    invoker_email=invoker.email,
                    runtime_member=runtime.member,
                    invocation_grants=handler.invocation_grants,
                    region=region,
                ),
                pulumi.ResourceOptions(parent=self, depends_on=after_first),
            )
        handler, jobs = handlers[cfg.region], regional_jobs[cfg.region]
        dead_letter_topic(cfg, runtime.member, apis, self)
        monitoring = RunMonitoring(
            f"{prefix}-monitoring",
            RunMonitoringArgs(
                placement=place,
                config=cfg,
                # A function's Cloud Run service takes the function's name, lowercased and
                # with '_' as '-' ("Deploy a Cloud Run function"); the prefix has neither.
                service_name=place.physical("handler"),
            ),
            children,
        )

        self.service_url = handler.service_url
        self.job_names = jobs.job_names
        self.runtime_service_account = runtime.email
        self.invoker_service_account = invoker.email
        self.build_service_account = handler.build_service_account
        self.database = ledger.database_name
        self.collection = cfg.collection
        self.dashboard = monitoring.dashboard.id
        self.force_run_commands = self.job_names.apply(
            lambda names: {
                job_name: (
                    f"gcloud scheduler jobs run {job_name} "
                    f"--location={cfg.region} --project={cfg.project}"
                )
                for job_name in names
            }
        )
        self.region_service_urls = None
        if cfg.extra_regions:
            self.region_service_urls = pulumi.Output.all(
                *[handlers[region].service_url for region in cfg.regions]
            ).apply(lambda urls: dict(zip(cfg.regions, urls, strict=True)))
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
                "dashboard": self.dashboard,
                **(
                    {}
                    if self.region_service_urls is None
                    else {"regionServiceUrls": self.region_service_urls}
                ),
            }
        )
