"""The audit's Cloud Scheduler lister: the jobs.list answer read as documented, every failure
one reason, and no Google client on the handler's import path."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest

from runledger.audit.pause_log import LOGGING_API, StateChange
from runledger.audit.scheduler_state import (
    API,
    PAGE_SIZE,
    LiveJob,
    live_job,
    scheduler_lister,
)
from runledger.exceptions import SchedulerAbsent, SchedulerUnreadable
from tests.handler.support import HANDLER_DIR

PARENT = "projects/acme-prod/locations/europe-west1"
PAUSE_METHOD = "google.cloud.scheduler.v1.CloudScheduler.PauseJob"
RESUME_METHOD = "google.cloud.scheduler.v1.CloudScheduler.ResumeJob"
SINCE = datetime(2026, 10, 16, 6, 0, tzinfo=UTC)


class Answer:
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status_code = status
        self._body = body

    def json(self) -> dict[str, Any]:
        return self._body


class Session:
    """Stands in for google-auth's AuthorizedSession: answers pages, records the calls.

    `pages` answer Scheduler's jobs.list (GET), `log_pages` Logging's entries.list (POST).
    """

    calls: ClassVar[list[tuple[str, dict[str, str]]]] = []
    pages: ClassVar[list[Answer]] = []
    posts: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    log_pages: ClassVar[list[Answer]] = []

    def __init__(self, credentials: object) -> None:
        self.credentials = credentials

    def get(self, url: str, params: dict[str, str], timeout: float) -> Answer:
        Session.calls.append((url, params))
        return Session.pages.pop(0)

    def post(self, url: str, json: dict[str, Any], timeout: float) -> Answer:
        Session.posts.append((url, dict(json)))
        return Session.log_pages.pop(0) if Session.log_pages else Answer(200, {})


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> type[Session]:
    import google.auth
    from google.auth.transport import requests

    monkeypatch.setattr(google.auth, "default", lambda scopes: ("credentials", "acme-prod"))
    monkeypatch.setattr(requests, "AuthorizedSession", Session)
    Session.calls, Session.pages, Session.posts, Session.log_pages = [], [], [], []
    return Session


def job(name: str, state: str = "ENABLED", **extra: Any) -> dict[str, Any]:
    return {"name": f"{PARENT}/jobs/{name}", "state": state, "schedule": "0 * * * *"} | extra


def test_a_job_resource_is_read_by_its_documented_fields() -> None:
    resource = job(
        "etl",
        "PAUSED",
        schedule="0  2 * * *",
        timeZone="Europe/Berlin",
        userUpdateTime="2026-10-16T10:30:00.123456Z",
    )
    # userUpdateTime is not read: the API does not say a pause sets it.
    assert live_job(resource) == LiveJob("etl", True, "0 2 * * *", "Europe/Berlin")
    # No timeZone is UTC; a job the system disabled is not a deliberate pause.
    assert live_job(job("sync", "DISABLED")) == LiveJob("sync", False, "0 * * * *", "UTC")


def test_one_listing_follows_every_page(session) -> None:
    session.pages = [
        Answer(200, {"jobs": [job("etl", "PAUSED")], "nextPageToken": "p2"}),
        Answer(200, {"jobs": [job("report")]}),
    ]
    jobs = scheduler_lister("acme-prod", "europe-west1", {})(SINCE)
    assert sorted(jobs) == ["etl", "report"] and jobs["etl"].paused
    assert session.calls == [
        (f"{API}/{PARENT}/jobs", {"pageSize": str(PAGE_SIZE)}),
        (f"{API}/{PARENT}/jobs", {"pageSize": str(PAGE_SIZE), "pageToken": "p2"}),
    ]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (Answer(403, {}), "permission cloudscheduler.jobs.list denied"),
        (Answer(503, {}), "jobs.list answered HTTP 503"),
    ],
)
def test_an_error_answer_is_one_reason(session, answer: Answer, reason: str) -> None:
    session.pages = [answer]
    with pytest.raises(SchedulerUnreadable, match=reason):
        scheduler_lister("acme-prod", "europe-west1", {})(SINCE)


def test_no_credentials_and_the_emulator_are_reasons_not_errors(monkeypatch) -> None:
    import google.auth
    from google.auth import exceptions

    def no_adc(scopes: list[str]) -> None:
        raise exceptions.DefaultCredentialsError("none")

    monkeypatch.setattr(google.auth, "default", no_adc)
    with pytest.raises(SchedulerUnreadable, match="no application-default credentials"):
        scheduler_lister("acme-prod", "europe-west1", {})(SINCE)
    local = {"FIRESTORE_EMULATOR_HOST": "127.0.0.1:8080"}
    with pytest.raises(SchedulerAbsent, match="local run on the Firestore emulator"):
        scheduler_lister("acme-prod", "europe-west1", local)(SINCE)


def test_the_handler_imports_no_google_auth_before_an_audit_runs() -> None:
    probe = (
        "import sys, runledger.service.app; "
        "print(sorted(m for m in sys.modules if m.startswith('google.auth')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=HANDLER_DIR, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def entry(
    job: str, method: str, at: str, location: str = "europe-west1", **payload: Any
) -> dict[str, Any]:
    """An Admin Activity audit log entry of a Scheduler call, as entries.list returns it."""
    return {
        "timestamp": at,
        "logName": "projects/acme-prod/logs/cloudaudit.googleapis.com%2Factivity",
        "resource": {
            "type": "cloud_scheduler_job",
            "labels": {"job_id": job, "location": location, "project_id": "acme-prod"},
        },
        "protoPayload": {
            "serviceName": "cloudscheduler.googleapis.com",
            "methodName": method,
            "resourceName": f"projects/acme-prod/locations/{location}/jobs/{job}",
        }
        | payload,
    }


def test_each_job_gets_its_pauses_and_resumes_from_the_admin_activity_log(session) -> None:
    session.pages = [Answer(200, {"jobs": [job("etl", "PAUSED"), job("report")]})]
    session.log_pages = [
        Answer(
            200,
            {
                "entries": [
                    entry("etl", PAUSE_METHOD, "2026-10-16T07:00:00Z"),
                    entry("etl", RESUME_METHOD, "2026-10-16T08:00:00.5Z"),
                ],
                "nextPageToken": "n2",
            },
        ),
        Answer(
            200,
            {
                "entries": [
                    # A call that failed changed nothing.
                    entry("etl", RESUME_METHOD, "2026-10-16T08:30:00Z", status={"code": 7}),
                    entry("etl", PAUSE_METHOD, "2026-10-16T09:00:00Z"),
                    # Another location's job of the same id is another job.
                    entry("etl", RESUME_METHOD, "2026-10-16T09:10:00Z", location="us-east1"),
                ]
            },
        ),
    ]

    jobs = scheduler_lister("acme-prod", "europe-west1", {})(SINCE)

    at = datetime(2026, 10, 16, 0, 0, tzinfo=UTC).replace
    assert jobs["etl"].changes == (
        StateChange(at(hour=7), True),
        StateChange(at(hour=8, microsecond=500000), False),
        StateChange(at(hour=9), True),
    )
    assert jobs["etl"].history_from == SINCE and jobs["report"].history_from == SINCE
    assert jobs["report"].changes == ()
    (url, body), (_, second) = session.posts
    assert url == LOGGING_API
    assert body["resourceNames"] == ["projects/acme-prod"]
    query = body["filter"]
    assert 'logName="projects/acme-prod/logs/cloudaudit.googleapis.com%2Factivity"' in query
    # Only what Scheduler's audit logging page documents: no resource type or labels.
    assert 'protoPayload.serviceName="cloudscheduler.googleapis.com"' in query
    assert "resource." not in query
    assert f'protoPayload.methodName="{PAUSE_METHOD}"' in query
    assert f'protoPayload.methodName="{RESUME_METHOD}"' in query
    assert 'timestamp>="2026-10-16T06:00:00Z"' in query
    assert second["pageToken"] == "n2"


@pytest.mark.parametrize(
    "resource",
    [{"type": "audited_resource", "labels": {"service": "cloudscheduler.googleapis.com"}}, {}],
)
def test_an_entry_names_its_job_by_resource_name_whatever_its_resource(session, resource) -> None:
    session.pages = [Answer(200, {"jobs": [job("etl", "PAUSED")]})]
    logged = entry("etl", PAUSE_METHOD, "2026-10-16T07:00:00Z") | {"resource": resource}
    session.log_pages = [Answer(200, {"entries": [logged]})]

    (etl,) = scheduler_lister("acme-prod", "europe-west1", {})(SINCE).values()

    assert etl.changes == (StateChange(datetime(2026, 10, 16, 7, 0, tzinfo=UTC), True),)


def test_a_log_that_cannot_be_read_leaves_the_listing_without_history(session) -> None:
    session.pages = [Answer(200, {"jobs": [job("etl", "PAUSED")]})]
    session.log_pages = [Answer(403, {})]

    (etl,) = scheduler_lister("acme-prod", "europe-west1", {})(SINCE).values()

    assert etl.paused and etl.history_from is None and etl.changes == ()
    assert etl.history_unread == "permission logging.logEntries.list denied"


DELETE_METHOD = "google.cloud.scheduler.v1.CloudScheduler.DeleteJob"
CREATE_METHOD = "google.cloud.scheduler.v1beta1.CloudScheduler.CreateJob"


def test_a_deletion_and_a_creation_are_read_as_a_pause_and_a_resume(session) -> None:
    """A deploy that removed a job and one that added it back: no time was sent between."""
    session.pages = [Answer(200, {"jobs": [job("etl")]})]
    created = entry("etl", CREATE_METHOD, "2026-10-16T09:00:00Z") | {}
    # A CreateJob may name the parent location: the created job's name is in its request.
    created["protoPayload"] = created["protoPayload"] | {
        "resourceName": PARENT,
        "request": {"parent": PARENT, "job": {"name": f"{PARENT}/jobs/etl"}},
    }
    session.log_pages = [
        Answer(200, {"entries": [entry("etl", DELETE_METHOD, "2026-10-16T07:00:00Z"), created]})
    ]

    (etl,) = scheduler_lister("acme-prod", "europe-west1", {})(SINCE).values()

    at = datetime(2026, 10, 16, 0, 0, tzinfo=UTC).replace
    assert etl.changes == (StateChange(at(hour=7), True), StateChange(at(hour=9), False))
    assert [change.method for change in etl.changes] == ["DeleteJob", "CreateJob"]
    query = session.posts[0][1]["filter"]
    assert f'protoPayload.methodName="{DELETE_METHOD}"' in query
    assert f'protoPayload.methodName="{CREATE_METHOD}"' in query
