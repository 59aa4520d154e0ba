"""When each job was paused and resumed: Cloud Scheduler's Admin Activity audit log.

Every PauseJob and ResumeJob call, from the console, gcloud or the stack's own
`pulumi up`, writes an Admin Activity audit log entry (Cloud Audit Logs: Admin
Activity logs are always written and cannot be turned off), with
`protoPayload.methodName` "google.cloud.scheduler.VERSION.CloudScheduler.PauseJob"
or "...ResumeJob". The name carries the API version the call went through:
v1 (the provider, the console, `gcloud scheduler`), v1beta1 (`gcloud beta`) or
v1alpha1 (`gcloud alpha`); "Cloud Scheduler audit logging" lists all three
versions' methods as Admin Activity (ADMIN_WRITE). A call through any of them
pauses the same job, so every version is read.

The query names only what that page documents: the service
(`protoPayload.serviceName="cloudscheduler.googleapis.com"`, its filter "for this
service"), the method names, the Admin Activity log's name and `timestamp`. It
does not assume a monitored resource type or its labels (no primary source
states which one Scheduler's audit entries carry): an entry says which job it is
about in `protoPayload.resourceName` (AuditLog: "the resource or collection that
is the target of the operation"; a job's name is
`projects/PROJECT/locations/LOCATION/jobs/JOB`, REST `Job.name`), read first,
with `resource.labels` `job_id` and `location` as a fallback; entries of other
locations are left out here. Should entries still go missing, the audit says so
(`audit.pauses`: the log disagrees with the live state). The audit reads them with one filtered
`entries.list` (Cloud Logging REST v2, `POST /v2/entries:list`), which needs
`logging.logEntries.list` on the project (Admin Activity entries are not
private logs: `logging.privateLogEntries.list` is for Data Access ones). The
stack grants the handler's account a custom role holding only that.

A DeleteJob and a CreateJob (a deploy removing a job and adding it back, or
creating it) are read too, as a pause and a resume: Scheduler sends none of a
job's times between its deletion and its creation, so those times were never due,
and a job added back with the schedule it had keeps its epoch and watermark
(`ledger.epochs`) without its absence read as missed or caught up. A job's first
CreateJob shows it absent before. The job is the call's `resourceName`; for a
CreateJob that names the parent location instead, the created job's name in the
call's request (`request.job.name`) is read.

An UpdateJob (a console edit, a `pulumi up` changing the job) is read as well, and
so is every CreateJob: the schedule may have changed at each (the entry's request is
not relied on to say what it changed), which `audit.pauses.edited` weighs. A schedule
edited and edited back between two audits leaves the listing as it was, and only these
calls show that its times in between may not have been sent.

A call that failed (`protoPayload.status.code` set and not 0) changed nothing
and is left out. Anything that keeps the whole history from being read raises
`SchedulerUnreadable`: a partial history would show a pause as shorter than it
was.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from runledger.delivery.identify import parse_schedule_time
from runledger.exceptions import BadRequest, SchedulerUnreadable

LOGGING_API = "https://logging.googleapis.com/v2/entries:list"
SERVICE = "cloudscheduler.googleapis.com"
_JOB_NAME = re.compile(r"^projects/[^/]+/locations/([^/]+)/jobs/([^/]+)$")
# Every API version whose PauseJob and ResumeJob write to the log (see the module doc).
API_VERSIONS = ("v1", "v1beta1", "v1alpha1")
PAUSE_METHODS = tuple(f"google.cloud.scheduler.{v}.CloudScheduler.PauseJob" for v in API_VERSIONS)
RESUME_METHODS = tuple(f"google.cloud.scheduler.{v}.CloudScheduler.ResumeJob" for v in API_VERSIONS)
# A deletion stops a job's runs as a pause does; a creation starts them as a resume does.
DELETE_METHODS = tuple(f"google.cloud.scheduler.{v}.CloudScheduler.DeleteJob" for v in API_VERSIONS)
CREATE_METHODS = tuple(f"google.cloud.scheduler.{v}.CloudScheduler.CreateJob" for v in API_VERSIONS)
# An edit may change the schedule; a creation sets one (read as a resume too).
UPDATE_METHODS = tuple(f"google.cloud.scheduler.{v}.CloudScheduler.UpdateJob" for v in API_VERSIONS)
UPDATE_CALL = "UpdateJob"
SCHEDULE_CALLS = (UPDATE_CALL, "CreateJob")
PAGE_SIZE = 1000  # the largest page entries.list returns
# One call of a Google REST API the audit reads (this log, Scheduler's listing) and
# how many pages of it the audit follows.
CALL_TIMEOUT_S = 10
_MAX_PAGES = 20


@dataclass(frozen=True)
class StateChange:
    """A PauseJob or DeleteJob (`paused` True: no run sent after it) or a ResumeJob or
    CreateJob (False) call on a job, at `at`; `call` names it ("": a pause or resume).
    An UpdateJob changes no state (`paused` False, unread): `changes_state` says so."""

    at: datetime
    paused: bool
    call: str = field(default="", compare=False)

    @property
    def method(self) -> str:
        return self.call or ("PauseJob" if self.paused else "ResumeJob")

    @property
    def changes_state(self) -> bool:
        """Whether the call paused or resumed the job (an UpdateJob did neither)."""
        return self.call != UPDATE_CALL

    @property
    def edits(self) -> bool:
        """Whether the call may have set the job's schedule (an UpdateJob or a CreateJob)."""
        return self.call in SCHEDULE_CALLS


def pause_filter(project: str, since: datetime) -> str:
    """The Logging query for the project's Scheduler pauses, resumes, deletions,
    creations and edits since `since`."""
    when = since.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return " AND ".join(
        [
            f'logName="projects/{project}/logs/cloudaudit.googleapis.com%2Factivity"',
            f'protoPayload.serviceName="{SERVICE}"',
            "(" + " OR ".join(f'protoPayload.methodName="{method}"' for method in _methods()) + ")",
            f'timestamp>="{when}"',
        ]
    )


def _methods() -> tuple[str, ...]:
    return PAUSE_METHODS + RESUME_METHODS + DELETE_METHODS + CREATE_METHODS + UPDATE_METHODS


def change_of(entry: dict[str, Any], region: str) -> tuple[str, StateChange] | None:
    """The job id and change one entry records of a job in `region`; None for a failed
    call, another location's job or a malformed entry."""
    payload = entry.get("protoPayload") or {}
    if (payload.get("status") or {}).get("code", 0):
        return None
    method = payload.get("methodName")
    located = _job_of(payload, entry.get("resource") or {})
    stamp = entry.get("timestamp")
    if method not in _methods() or not located or not isinstance(stamp, str):
        return None
    location, job = located
    if location != region:
        return None
    try:
        at = parse_schedule_time(stamp)
    except BadRequest:
        return None
    call = "" if method in PAUSE_METHODS + RESUME_METHODS else str(method).rsplit(".", 1)[-1]
    return str(job), StateChange(at, method in PAUSE_METHODS + DELETE_METHODS, call)


def _job_of(payload: dict[str, Any], resource: dict[str, Any]) -> tuple[str, str] | None:
    """(location, job id) from the entry's resourceName (a CreateJob's may name the parent:
    then its request's job name), else from its resource's labels."""
    request = payload.get("request")
    created = request.get("job") if isinstance(request, dict) else None
    for name in (payload.get("resourceName", ""), (created or {}).get("name", "")):
        named = _JOB_NAME.match(str(name))
        if named:
            return named.group(1), named.group(2)
    labels = resource.get("labels") or {}
    if labels.get("location") and labels.get("job_id"):
        return str(labels["location"]), str(labels["job_id"])
    return None


def pause_changes(
    session: Any, project: str, region: str, since: datetime
) -> dict[str, list[StateChange]]:
    """Each job's pauses and resumes since `since`, oldest first, through `session`
    (google-auth's AuthorizedSession); raises SchedulerUnreadable."""
    body: dict[str, Any] = {
        "resourceNames": [f"projects/{project}"],
        "filter": pause_filter(project, since),
        "orderBy": "timestamp asc",
        "pageSize": PAGE_SIZE,
    }
    changes: dict[str, list[StateChange]] = {}

    def send(token: str) -> Any:
        page = body | ({"pageToken": token} if token else {})
        return session.post(LOGGING_API, json=page, timeout=CALL_TIMEOUT_S)

    for page in google_pages(send, "entries.list", "logging.logEntries.list"):
        for entry in page.get("entries", []):
            found = change_of(entry, region)
            if found is not None:
                changes.setdefault(found[0], []).append(found[1])
    return {job: sorted(items, key=lambda c: c.at) for job, items in changes.items()}


def google_pages(
    send: Callable[[str], Any], method: str, permission: str
) -> Iterator[dict[str, Any]]:
    """Each page of a paged Google REST call, `send(page_token)` ("" first).

    Any failure (transport or token refresh, a refusal, another status, more than
    _MAX_PAGES pages) raises SchedulerUnreadable with one line naming `method`.
    """
    token = ""
    for _ in range(_MAX_PAGES):
        try:
            answer = send(token)
        except Exception as exc:  # transport or token refresh: no answer to go by
            raise SchedulerUnreadable(f"{method} failed: {type(exc).__name__}") from None
        if answer.status_code == 403:
            raise SchedulerUnreadable(f"permission {permission} denied")
        if answer.status_code != 200:
            raise SchedulerUnreadable(f"{method} answered HTTP {answer.status_code}")
        page = answer.json()
        yield page
        token = page.get("nextPageToken", "")
        if not token:
            return
    raise SchedulerUnreadable(f"{method} returned more than {_MAX_PAGES} pages")
