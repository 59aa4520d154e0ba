"""The JOBS contract: a user module maps Scheduler job ids to plain functions."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from runledger.config import JOBS_MODULE_ENV
from runledger.exceptions import ConfigError
from runledger.facts import JOB_ID
from runledger.sdk.context import RunContext

JobFn = Callable[[RunContext], Any]


class Jobs(dict[str, JobFn]):
    """A JOBS dict that fills itself with `@JOBS.job("scheduler-job-id")`."""

    def job(self, job_id: str) -> Callable[[JobFn], JobFn]:
        if not JOB_ID.fullmatch(job_id):
            raise ValueError(f"{job_id!r} is not a valid Cloud Scheduler job id")
        if job_id in self:
            raise ValueError(f"job {job_id!r} is registered twice")

        def register(fn: JobFn) -> JobFn:
            self[job_id] = fn
            return fn

        return register


def load_jobs(module_name: str, variable: str = JOBS_MODULE_ENV) -> Mapping[str, JobFn]:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{variable}: cannot import module {module_name!r}: {exc}") from exc
    jobs = getattr(module, "JOBS", None)
    if not isinstance(jobs, Mapping):
        raise ConfigError(f"{variable}: module {module_name!r} has no JOBS dict")
    for job_id, fn in jobs.items():
        if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
            raise ConfigError(f"{variable}: JOBS key {job_id!r} is not a Cloud Scheduler job id")
        if not callable(fn):
            raise ConfigError(f"{variable}: JOBS[{job_id!r}] is not callable")
    return jobs
