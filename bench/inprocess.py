"""Both sides driven in-process, on a client whose RPCs are counted.

The served processes cannot be instrumented from outside, so RPC and
document counts come from the same application classes run here: the
handler's `runledger.service.app.App` with its real Firestore store, and the
baseline's `BaselineApp`. `preclaim` plants a claim through a second,
uncounted client, to set up the duplicate and reclaim scenarios with each
side's own code rather than hand-written documents.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from google.cloud import firestore

from bench.baseline import BaselineApp
from bench.schedule import Headers
from runledger.config import Settings
from runledger.delivery.identify import identify_run
from runledger.ledger.firestore_store import FirestoreRunStore
from runledger.sdk.registry import load_jobs
from runledger.service.app import App


def _utc_now() -> datetime:
    return datetime.now(UTC)


class InProcessSide(Protocol):
    name: str
    settings: Settings

    def deliver(self, headers: Headers) -> int:
        """Handle one delivery on the counted client; return the HTTP status."""

    def preclaim(self, headers: Headers, at: datetime) -> None:
        """Claim the delivery's run as an attempt that started at `at` and never finished."""


class HandlerSide:
    name = "handler"

    def __init__(self, settings: Settings, counted: firestore.Client, setup: firestore.Client):
        self.settings = settings
        self._jobs = load_jobs(settings.jobs_module)
        self._counted = counted
        self._setup = setup

    def _app(self, client: firestore.Client, clock: Any = _utc_now) -> App:
        store = FirestoreRunStore(client, self.settings.collection)
        return App(self.settings, self._jobs, lambda: store, clock=clock)

    def deliver(self, headers: Headers) -> int:
        with contextlib.redirect_stdout(io.StringIO()):  # App logs a line per request
            return self._app(self._counted).handle("POST", headers, b"").status

    def preclaim(self, headers: Headers, at: datetime) -> None:
        app = self._app(self._setup, clock=lambda: at)
        app.ledger.claim(identify_run(headers, self.settings, self._jobs, at))


class BaselineSide:
    name = "baseline"

    def __init__(self, settings: Settings, counted: firestore.Client, setup: firestore.Client):
        self.settings = settings
        self._jobs = load_jobs(settings.jobs_module)
        self._counted = BaselineApp(settings, self._jobs, counted)
        self._setup = setup

    def deliver(self, headers: Headers) -> int:
        return self._counted.handle(headers)[1]

    def preclaim(self, headers: Headers, at: datetime) -> None:
        app = BaselineApp(self.settings, self._jobs, self._setup, clock=lambda: at)
        run = identify_run(headers, self.settings, self._jobs, at)
        app.ledger.claim(run.key, "preclaimed-attempt", at)


def make_side(
    name: str, env: Mapping[str, str], counted: firestore.Client, setup: firestore.Client
) -> InProcessSide:
    settings = Settings.from_env(env)
    if name == "handler":
        return HandlerSide(settings, counted, setup)
    return BaselineSide(settings, counted, setup)
