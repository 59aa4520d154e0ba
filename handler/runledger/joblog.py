"""Job code's standard `logging`, as Cloud Logging structured entries that carry their run.

Cloud Run sends whatever a service writes to stdout to Cloud Logging and parses
a line that is one JSON object into a structured entry (severity, message,
jsonPayload: "View and write Cloud Run function logs", structured logging);
google-cloud-logging's `StructuredLogHandler` writes exactly that
("Handler to format logs into the Cloud Logging structured log format, and
write them to standard output", google.cloud.logging_v2.handlers.structured_log).
Without a handler, Python drops INFO records, so a job's `log.info(...)` would
appear nowhere.

While a job runs, each of its records gets the run's fields in `json_fields`
(the handler's documented way to add jsonPayload fields), under the same names
the handler's own per-request line uses: `jsonPayload.run_key="..."` in the
Logs Explorer shows one run's lines, the job's and the handler's alike.

The fields live in a context variable, so they follow the job's own thread
only: a thread the job starts itself logs without them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TextIO

from runledger.context import RunContext

_RUN_FIELDS: ContextVar[dict[str, str] | None] = ContextVar("runledger_run_fields", default=None)


class RunFieldsFilter(logging.Filter):
    """Adds the current run's fields; keeps INFO from outside a run out.

    Outside a run only WARNING and above pass: the INFO lines there are a web
    server's access log and the like, which Cloud Run records per request anyway.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _RUN_FIELDS.get()
        if fields is None:
            return record.levelno >= logging.WARNING
        record.json_fields = fields | dict(getattr(record, "json_fields", None) or {})
        return True


@contextlib.contextmanager
def run_fields(context: RunContext) -> Iterator[None]:
    """Tag every record logged in this block (by the job) with `context`'s run."""
    token = _RUN_FIELDS.set(
        {
            "run_key": context.run_id,
            "job": context.job_name,
            "schedule_time": context.schedule_time.isoformat(),
            "attempt_id": context.attempt_id,
        }
    )
    try:
        yield
    finally:
        _RUN_FIELDS.reset(token)


def install(stream: TextIO | None = None) -> logging.Handler:
    """Send the root logger's INFO and above to stdout as structured entries; once per process.

    A second call (a test importing the entry point again) returns the handler
    already installed instead of doubling every line.
    """
    # Imported here, not at the top: the app imports `run_fields` on every
    # path (tests, benchmarks), and only the deployed entry point needs the
    # Google library.
    from google.cloud.logging_v2.handlers.structured_log import StructuredLogHandler

    root = logging.getLogger()
    for handler in root.handlers:
        if any(isinstance(f, RunFieldsFilter) for f in handler.filters):
            return handler
    handler = StructuredLogHandler(stream=stream)
    handler.addFilter(RunFieldsFilter())
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return handler
