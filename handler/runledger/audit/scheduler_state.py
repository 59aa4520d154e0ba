"""Each job's live state as Cloud Scheduler holds it: paused or enabled, schedule, time zone,
and its pauses and resumes.

The audit judges runs against DEDUP_SCHEDULES, which says what the stack
deployed. An operator may since have paused a job (console, `gcloud scheduler
jobs pause`) or edited its schedule; Scheduler then sends other runs than
DEDUP_SCHEDULES implies. So the audit asks Scheduler once per audit, with one
listing of the stack's location (`projects.locations.jobs.list`, REST v1: "Lists
jobs", up to 500 a page, permission `cloudscheduler.jobs.list` on the location's
parent). The stack grants the handler's account a custom role holding only
that (`facts.SCHEDULER_READ_PERMISSIONS`; "Cloud Scheduler roles and
permissions", lowest-level resource: project). It reads when each job was
paused and resumed from Scheduler's Admin Activity audit log (`audit.pause_log`,
a custom role holding `facts.PAUSE_LOG_PERMISSIONS`: `logging.logEntries.list`).

A `Job` carries `state` (ENABLED, PAUSED, DISABLED "by the system due to
error", UPDATE_FAILED), `schedule` and `timeZone`. Only PAUSED is a deliberate
pause: a job the system disabled keeps its runs judged, so they are reported.
Its `userUpdateTime` ("the time the last job update was made by the user") is
not read: the API does not say a pause sets it, so it says nothing of when a
pause began (`audit.pauses` takes that from the log).

Reading Scheduler is best effort: no grant yet, a CLI without credentials or
an error answer raise `SchedulerUnreadable` with a one-line reason; a local run
on the emulator, which has no Scheduler, raises `SchedulerAbsent`. A log that
cannot be read leaves the listing standing, its jobs without a pause history
(`history_unread` says why). google-auth is imported only when a listing is
made, never on a delivery's path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from runledger.audit.pause_log import CALL_TIMEOUT_S, StateChange, google_pages, pause_changes
from runledger.exceptions import SchedulerAbsent, SchedulerUnreadable
from runledger.schedules import JobSchedule

API = "https://cloudscheduler.googleapis.com/v1"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
PAGE_SIZE = 500  # the largest page jobs.list returns


@dataclass(frozen=True)
class LiveJob:
    """One Scheduler job as listed, with its pause history.

    `changes` are every pause and resume from `history_from` to the listing,
    oldest first; `edits` every instant its schedule may have changed then (an
    UpdateJob or CreateJob); `history_from` None: no history (`history_unread` says why).
    """

    id: str
    paused: bool
    schedule: str
    time_zone: str
    changes: tuple[StateChange, ...] = ()
    history_from: datetime | None = None
    history_unread: str = "not read"
    edits: tuple[datetime, ...] = ()

    def logged(self, calls: Sequence[StateChange], since: datetime) -> LiveJob:
        """The job with the log's calls on it since `since`, each read once: a pause or
        resume (a DeleteJob, a CreateJob) as a change of state, an UpdateJob or a
        CreateJob as an edit."""
        ordered = sorted(calls, key=lambda call: call.at)
        return replace(
            self,
            changes=tuple(call for call in ordered if call.changes_state),
            edits=tuple(call.at for call in ordered if call.edits),
            history_from=since,
        )


# Lists the live jobs of the stack's location, by job id, each with its pauses and
# resumes since the instant given; raises SchedulerUnreadable (SchedulerAbsent: none here).
Lister = Callable[[datetime], Mapping[str, LiveJob]]


def live_job(resource: Mapping[str, Any]) -> LiveJob:
    """A LiveJob from one `Job` of a jobs.list answer (REST JSON, camelCase), no history yet."""
    return LiveJob(
        id=str(resource.get("name", "")).rsplit("/", 1)[-1],
        paused=resource.get("state") == "PAUSED",
        schedule=" ".join(str(resource.get("schedule", "")).split()),
        # An unset timeZone is UTC (Job.timeZone: "the default is to use UTC").
        time_zone=str(resource.get("timeZone") or "UTC"),
    )


def scheduler_lister(project: str, region: str, env: Mapping[str, str]) -> Lister:
    """List the jobs of `project`/`region` through Scheduler's REST API with ADC, and
    their pause history through Cloud Logging's (`audit.pause_log`).

    A run against the Firestore emulator is local: Scheduler is not asked.
    """

    def listing(since: datetime) -> dict[str, LiveJob]:
        if env.get("FIRESTORE_EMULATOR_HOST"):
            raise SchedulerAbsent("local run on the Firestore emulator")
        import google.auth
        from google.auth import exceptions as auth_exc
        from google.auth.transport.requests import AuthorizedSession

        try:
            credentials, _ = google.auth.default(scopes=[SCOPE])
        except auth_exc.DefaultCredentialsError:
            raise SchedulerUnreadable("no application-default credentials") from None
        return session_listing(AuthorizedSession(credentials), project, region, since)

    return listing


def session_listing(session: Any, project: str, region: str, since: datetime) -> dict[str, LiveJob]:
    """The jobs of `project`/`region` with their pauses and resumes since `since`, read
    through `session` (an AuthorizedSession, or the simulator's Scheduler and Logging);
    raises SchedulerUnreadable if the jobs cannot be listed."""
    url = f"{API}/projects/{project}/locations/{region}/jobs"
    jobs: dict[str, LiveJob] = {}

    def send(token: str) -> Any:
        params = {"pageSize": str(PAGE_SIZE)} | ({"pageToken": token} if token else {})
        return session.get(url, params=params, timeout=CALL_TIMEOUT_S)

    for page in google_pages(send, "jobs.list", "cloudscheduler.jobs.list"):
        for resource in page.get("jobs", []):
            job = live_job(resource)
            jobs[job.id] = job
    return _with_history(jobs, session, project, region, since)


def _with_history(
    jobs: dict[str, LiveJob], session: Any, project: str, region: str, since: datetime
) -> dict[str, LiveJob]:
    """The jobs with their pauses and resumes since `since`; a log not read leaves none."""
    try:
        changes = pause_changes(session, project, region, since)
    except SchedulerUnreadable as exc:
        return {job_id: replace(job, history_unread=str(exc)) for job_id, job in jobs.items()}
    return {job_id: job.logged(changes.get(job_id, ()), since) for job_id, job in jobs.items()}


def drift(job: JobSchedule, live: Mapping[str, LiveJob] | None) -> str:
    """How the job's live schedule differs from DEDUP_SCHEDULES; "" if it does not or is unknown."""
    if live is None:
        return ""
    state = live.get(job.id)
    if state is None:
        return "not in Cloud Scheduler: no run of it will be sent"
    if state.paused != job.paused:
        return (
            "paused in Cloud Scheduler, enabled in the stack: no run of it is sent (resume it, "
            "or set paused: true in the stack and deploy)"
            if state.paused
            else "enabled in Cloud Scheduler, paused in the stack: its runs are sent "
            "(pause it again, or remove paused from the stack and deploy)"
        )
    deployed = (" ".join(job.schedule.split()), job.time_zone)
    if (state.schedule, state.time_zone) == deployed:
        return ""
    return (
        f"Cloud Scheduler has {state.schedule!r} in {state.time_zone}, DEDUP_SCHEDULES "
        f"{deployed[0]!r} in {deployed[1]}: its runs are not judged until they agree "
        "(edit the stack's config, or undo the edit, and deploy)"
    )


def history_unread(
    schedules: Sequence[JobSchedule], live: Mapping[str, LiveJob] | None
) -> str | None:
    """Why the listed jobs came without their pause history, if they did."""
    for schedule in schedules:
        state = None if live is None else live.get(schedule.id)
        if state is not None and state.history_from is None:
            return state.history_unread
    return None
