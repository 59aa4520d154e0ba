"""Cloud Run functions entry point: thin glue between the request and runledger.App."""

from __future__ import annotations

import os
from collections.abc import Mapping

import flask
import functions_framework

from runledger.exceptions import ConfigError
from runledger.sdk.joblog import install as install_job_logging
from runledger.service.app import MAX_BODY_BYTES, App


def _request_headers() -> Mapping[str, str] | None:
    return flask.request.headers if flask.has_request_context() else None


# Job code's `logging` (INFO and up) goes to Cloud Logging as structured
# entries tagged with the run and the request's trace; without this Python
# drops every INFO record. The stack sets GOOGLE_CLOUD_PROJECT (the trace's project).
install_job_logging(headers=_request_headers, project=os.environ.get("GOOGLE_CLOUD_PROJECT"))

# Settings and the jobs module are checked here, at start-up, so a bad
# deployment fails to start, with one line naming the variable, instead of
# failing each delivery.
try:
    APP = App.from_env(os.environ)
except ConfigError as exc:
    raise SystemExit(f"handler configuration error: {exc}") from None


@functions_framework.http
def handle_scheduled_job(request: flask.Request) -> flask.Response:
    body = request.stream.read(MAX_BODY_BYTES + 1)
    response = APP.handle(request.method, request.headers.items(), body)
    return flask.make_response(flask.jsonify(response.body()), response.status)
