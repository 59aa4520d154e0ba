"""Which Scheduler job calls which handler, across the whole stack.

Stack rules need the pairing (job -> handler) to compare timeouts, leases,
retention and headers. The handler a job calls is found by URL first; during a real
preview the URLs of new services are still unknown, so the dependency graph
(the job's `httpTarget` was built from the handler's outputs) is the fallback.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pulumi_policy import PolicyResource
from pulumi_policy.proxy import UnknownValueError

from dedup_policies import handler_resource, types
from dedup_policies.handler_settings import HandlerSettings
from dedup_policies.props import as_text, get_path, url_is_under


@dataclass
class Handler:
    """A Cloud Run service or function, with the URLs a job may call it by."""

    resource: PolicyResource
    urls: list[str]
    urls_unknown: bool

    @property
    def label(self) -> str:
        return f"{self.resource.resource_type} '{self.resource.name}'"

    def settings(self) -> HandlerSettings:
        """DEDUP_* settings (reads the environment; unknown values raise, as the SDK intends)."""
        env = handler_resource.environment(self.resource.resource_type, self.resource.props)
        return HandlerSettings.from_env(env.values, env.unknown)

    def timeout_seconds(self) -> float | None:
        return handler_resource.timeout_seconds(self.resource.resource_type, self.resource.props)


@dataclass
class Job:
    """A Scheduler job and, once resolved, the handler of this stack it calls."""

    resource: PolicyResource
    uri: str | None
    uri_unknown: bool
    handler: Handler | None = None

    @property
    def label(self) -> str:
        return f"Scheduler job '{self.resource.name}'"


@dataclass
class StackView:
    """Every handler and job of the stack, jobs paired with their handler."""

    handlers: list[Handler] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)

    def jobs_calling(self, handler: Handler) -> list[Job]:
        return [job for job in self.jobs if job.handler is handler]

    def dedup_handlers(self) -> list[Handler]:
        """Handlers that run the ledger: called by a job or configured with DEDUP_* variables."""
        called = {id(job.handler) for job in self.jobs if job.handler is not None}
        result = []
        for handler in self.handlers:
            if id(handler) in called or _declares_dedup_env(handler):
                result.append(handler)
        return result


def _declares_dedup_env(handler: Handler) -> bool:
    env = handler_resource.environment(handler.resource.resource_type, handler.resource.props)
    return any(name.startswith("DEDUP_") for name in env.names())


def _job_uri(job: PolicyResource) -> tuple[str | None, bool]:
    try:
        return as_text(get_path(job.props, "httpTarget", "uri")), False
    except UnknownValueError:
        return None, True


def _depends_on(job: PolicyResource, handler: PolicyResource) -> bool:
    related = [*job.dependencies, *job.property_dependencies.get("httpTarget", [])]
    return any(dep.urn == handler.urn for dep in related)


def _resolve(job: Job, handlers: list[Handler]) -> Handler | None:
    if job.uri is not None:
        for handler in handlers:
            if any(url_is_under(job.uri, url) for url in handler.urls):
                return handler
    candidates = [h for h in handlers if _depends_on(job.resource, h.resource)]
    if job.uri_unknown or any(h.urls_unknown for h in candidates):
        return candidates[0] if len(candidates) == 1 else None
    return None


def build(resources: Iterable[PolicyResource]) -> StackView:
    """Collects handlers and jobs and pairs each job with the handler it calls."""
    view = StackView()
    for resource in resources:
        if resource.resource_type in types.HANDLER_TYPES:
            found, unknown = handler_resource.urls(resource.resource_type, resource.props)
            view.handlers.append(Handler(resource, found, unknown))
        elif resource.resource_type == types.SCHEDULER_JOB:
            uri, unknown = _job_uri(resource)
            view.jobs.append(Job(resource, uri, unknown))
    for job in view.jobs:
        job.handler = _resolve(job, view.handlers)
    return view
