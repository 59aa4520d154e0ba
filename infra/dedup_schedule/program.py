"""The Pulumi program, as one function every project's `infra/__main__.py` calls.

The template's program and a team's copy run the same code: the copy installs
`dedup_schedule` at its pinned version, so a fix here reaches it on the next pin
bump instead of living in a file the team owns. `deploy` reads the stack's config,
builds one `DedupSchedule` and exports what users need.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulumi

from dedup_schedule.component import DedupSchedule, DedupScheduleArgs
from dedup_schedule.config.capacity import capacity
from dedup_schedule.config.model import ConfigError
from dedup_schedule.config.parser import parse_config
from dedup_schedule.config.provider_keys import provider_key_warnings
from dedup_schedule.job_ids import check_handler_jobs
from dedup_schedule.source import HandlerSourceError


def stack_values(project_name: str) -> dict[str, Any]:
    """The stack's config as the `{namespace:key: value}` map `parse_config` takes.

    The language host hands the whole config map to the program in PULUMI_CONFIG;
    listing its keys (not just the ones we know) lets the parser reject typos. Values
    are read through `pulumi.Config`; structured ones arrive as JSON text. The
    provider's other `gcp:` keys come by name only (None), their values unread, so a
    missing `gcp:region` can name the misspelt key the stack sets instead.
    """
    wanted = {("gcp", "project"), ("gcp", "region")}
    values: dict[str, Any] = {}
    for full_key in pulumi.runtime.get_config_env():
        namespace, _, key = full_key.partition(":")
        key = key.removeprefix("config:")  # legacy `ns:config:key`
        if namespace == project_name:
            wanted.add((namespace, key))
        elif namespace == "gcp" and (namespace, key) not in wanted:
            values[f"gcp:{key}"] = None
    for namespace, key in sorted(wanted):
        value = pulumi.Config(namespace).get(key)
        if value is not None:
            values[f"{namespace}:{key}"] = value
    return values


def project_root(program_dir: Path) -> Path:
    """The directory holding Pulumi.yaml, whatever directory Pulumi runs the program from."""
    here = program_dir.resolve()
    for directory in (here, *here.parents):
        if (directory / "Pulumi.yaml").is_file():
            return directory
    raise ConfigError(f"no Pulumi.yaml above {here}")


def deploy(program_dir: Path) -> None:
    """The whole program for the project whose `main` is `program_dir` (its `infra/`)."""
    for warning in provider_key_warnings(pulumi.runtime.get_config_env()):
        pulumi.log.warn(warning)
    try:
        config = parse_config(stack_values(pulumi.get_project()), pulumi.get_project())
        handler_dir = project_root(program_dir) / config.handler_dir
        unscheduled = check_handler_jobs(config, handler_dir, f"{pulumi.get_project()}:")
        schedule = DedupSchedule(
            config.name_prefix, DedupScheduleArgs(config=config, handler_dir=handler_dir)
        )
    except (ConfigError, HandlerSourceError) as error:
        # A clean one-line failure instead of a Python traceback in `pulumi up`.
        raise pulumi.RunError(str(error)) from None

    for warning in config.window_warnings(datetime.now(UTC)):
        pulumi.log.warn(warning)
    for job_id in unscheduled:
        pulumi.log.warn(
            f"{config.handler_dir}/jobs.py: JOBS defines {job_id!r}, which no entry of "
            f"{pulumi.get_project()}:jobs schedules, so it never runs; add it to the stack "
            "or remove it"
        )
    pulumi.export("serviceUrl", schedule.service_url)
    pulumi.export("jobNames", schedule.job_names)
    pulumi.export("runtimeServiceAccount", schedule.runtime_service_account)
    pulumi.export("invokerServiceAccount", schedule.invoker_service_account)
    pulumi.export("buildServiceAccount", schedule.build_service_account)
    pulumi.export("database", schedule.database)
    pulumi.export("collection", schedule.collection)
    pulumi.export("forceRunCommands", schedule.force_run_commands)
    if schedule.region_service_urls is not None:
        pulumi.export("regionServiceUrls", schedule.region_service_urls)
    # Whether waiting duplicates can starve other jobs' deliveries, with the numbers.
    handler_capacity = capacity(config)
    if not handler_capacity.holds:
        pulumi.log.warn(f"handler capacity: {handler_capacity.summary()}")
    pulumi.export("handlerCapacity", handler_capacity.summary())
