"""Each job's live state as Cloud Scheduler holds it: paused or enabled, schedule, time zone.

The audit judges runs against DEDUP_SCHEDULES, which says what the stack
deployed. An operator may since have paused a job (console, `gcloud scheduler
jobs pause`) or edited its schedule; Scheduler then sends other runs than
DEDUP_SCHEDULES implies. So the audit asks Scheduler once per audit, with one
listing of the stack's location (`projects.locations.jobs.list`, REST v1: "Lists
jobs", up to 500 a page, permission `cloudscheduler.jobs.list` on the location's
parent). The stack grants the handler's account a custom role holding only
that (`facts.SCHEDULER_READ_PERMISSIONS`; "Cloud Scheduler roles and
permissions", lowest-level resource: project).

A `Job` carries `state` (ENABLED, PAUSED, DISABLED "by the system due to
error", UPDATE_FAILED), `schedule`, `timeZone` and `userUpdateTime`, "the time
the last job update was made by the user", which for a paused job is when it
was paused (or edited since). Only PAUSED is a deliberate pause: a job the
system disabled keeps its runs judged, so they are reported.

Reading Scheduler is best effort: no grant yet, a local run on the emulator or
a CLI without credentials raise `SchedulerUnreadable` with a one-line reason,
and the audit falls back to DEDUP_SCHEDULES and says so. google-auth is
imported only when a listing is made, never on a delivery's path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runledger.delivery.identify import parse_schedule_time
from runledger.exceptions import BadRequest, SchedulerUnreadable

API = "https://cloudscheduler.googleapis.com/v1"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
PAGE_SIZE = 500  # the largest page jobs.list returns
_TIMEOUT_S = 10
_MAX_PAGES = 20


@dataclass(frozen=True)
class LiveJob:
    """One Scheduler job as listed: `since` is its userUpdateTime, when Scheduler gave one."""

    id: str
    paused: bool
    schedule: str
    time_zone: str
    since: datetime | None


# Lists the live jobs of the stack's location, by job id; raises SchedulerUnreadable.
Lister = Callable[[], Mapping[str, LiveJob]]


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_schedule_time(value)
    except BadRequest:
        return None


def live_job(resource: Mapping[str, Any]) -> LiveJob:
    """A LiveJob from one `Job` of a jobs.list answer (REST JSON, camelCase)."""
    return LiveJob(
        id=str(resource.get("name", "")).rsplit("/", 1)[-1],
        paused=resource.get("state") == "PAUSED",
        schedule=" ".join(str(resource.get("schedule", "")).split()),
        # An unset timeZone is UTC (Job.timeZone: "the default is to use UTC").
        time_zone=str(resource.get("timeZone") or "UTC"),
        since=_time(resource.get("userUpdateTime")),
    )


def scheduler_lister(project: str, region: str, env: Mapping[str, str]) -> Lister:
    """List the jobs of `project`/`region` through Scheduler's REST API with ADC.

    A run against the Firestore emulator is local: Scheduler is not asked.
    """

    def listing() -> dict[str, LiveJob]:
        if env.get("FIRESTORE_EMULATOR_HOST"):
            raise SchedulerUnreadable("local run on the Firestore emulator")
        import google.auth
        from google.auth import exceptions as auth_exc
        from google.auth.transport.requests import AuthorizedSession

        try:
            credentials, _ = google.auth.default(scopes=[SCOPE])
        except auth_exc.DefaultCredentialsError:
            raise SchedulerUnreadable("no application-default credentials") from None
        session = AuthorizedSession(credentials)
        url = f"{API}/projects/{project}/locations/{region}/jobs"
        jobs: dict[str, LiveJob] = {}
        token = ""
        for _ in range(_MAX_PAGES):
            params = {"pageSize": str(PAGE_SIZE)} | ({"pageToken": token} if token else {})
            try:
                answer = session.get(url, params=params, timeout=_TIMEOUT_S)
            except Exception as exc:  # transport or token refresh: no verdict from Scheduler
                raise SchedulerUnreadable(f"jobs.list failed: {type(exc).__name__}") from None
            if answer.status_code == 403:
                raise SchedulerUnreadable("permission cloudscheduler.jobs.list denied")
            if answer.status_code != 200:
                raise SchedulerUnreadable(f"jobs.list answered HTTP {answer.status_code}")
            body = answer.json()
            for resource in body.get("jobs", []):
                job = live_job(resource)
                jobs[job.id] = job
            token = body.get("nextPageToken", "")
            if not token:
                return jobs
        raise SchedulerUnreadable(f"jobs.list returned more than {_MAX_PAGES} pages")

    return listing
