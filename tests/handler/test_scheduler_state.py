"""The audit's Cloud Scheduler lister: the jobs.list answer read as documented, every failure
one reason, and no Google client on the handler's import path."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest

from runledger.audit.scheduler_state import (
    API,
    PAGE_SIZE,
    LiveJob,
    live_job,
    scheduler_lister,
)
from runledger.exceptions import SchedulerUnreadable
from tests.handler.support import HANDLER_DIR

PARENT = "projects/acme-prod/locations/europe-west1"


class Answer:
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status_code = status
        self._body = body

    def json(self) -> dict[str, Any]:
        return self._body


class Session:
    """Stands in for google-auth's AuthorizedSession: answers pages, records the calls."""

    calls: ClassVar[list[tuple[str, dict[str, str]]]] = []
    pages: ClassVar[list[Answer]] = []

    def __init__(self, credentials: object) -> None:
        self.credentials = credentials

    def get(self, url: str, params: dict[str, str], timeout: float) -> Answer:
        Session.calls.append((url, params))
        return Session.pages.pop(0)


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> type[Session]:
    import google.auth
    from google.auth.transport import requests

    monkeypatch.setattr(google.auth, "default", lambda scopes: ("credentials", "acme-prod"))
    monkeypatch.setattr(requests, "AuthorizedSession", Session)
    Session.calls, Session.pages = [], []
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
    assert live_job(resource) == LiveJob(
        "etl", True, "0 2 * * *", "Europe/Berlin", datetime(2026, 10, 16, 10, 30, 0, 123456, UTC)
    )
    # No timeZone is UTC; a job the system disabled is not a deliberate pause.
    assert live_job(job("sync", "DISABLED")) == LiveJob("sync", False, "0 * * * *", "UTC", None)


def test_one_listing_follows_every_page(session) -> None:
    session.pages = [
        Answer(200, {"jobs": [job("etl", "PAUSED")], "nextPageToken": "p2"}),
        Answer(200, {"jobs": [job("report")]}),
    ]
    jobs = scheduler_lister("acme-prod", "europe-west1", {})()
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
        scheduler_lister("acme-prod", "europe-west1", {})()


def test_no_credentials_and_the_emulator_are_reasons_not_errors(monkeypatch) -> None:
    import google.auth
    from google.auth import exceptions

    def no_adc(scopes: list[str]) -> None:
        raise exceptions.DefaultCredentialsError("none")

    monkeypatch.setattr(google.auth, "default", no_adc)
    with pytest.raises(SchedulerUnreadable, match="no application-default credentials"):
        scheduler_lister("acme-prod", "europe-west1", {})()
    local = {"FIRESTORE_EMULATOR_HOST": "127.0.0.1:8080"}
    with pytest.raises(SchedulerUnreadable, match="local run on the Firestore emulator"):
        scheduler_lister("acme-prod", "europe-west1", local)()


def test_the_handler_imports_no_google_auth_before_an_audit_runs() -> None:
    probe = (
        "import sys, runledger.delivery.app; "
        "print(sorted(m for m in sys.modules if m.startswith('google.auth')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=HANDLER_DIR, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
