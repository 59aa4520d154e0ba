"""Job code's standard `logging`, as Cloud Logging structured entries that carry their run.

Cloud Run sends whatever a service writes to stdout to Cloud Logging and parses
a line that is one JSON object into a structured entry: `severity` and
`message` become the entry's, a few `logging.googleapis.com/...` keys
(`labels`, `sourceLocation`, `trace`, `spanId`, `trace_sampled`) fill the
entry's fields of those names, and the rest goes to jsonPayload (Cloud Logging
"Structured logging", special JSON fields). `JsonLineHandler` writes those
lines itself, with the keys google-cloud-logging's `StructuredLogHandler`
writes: that library costs a cold start about half a second of imports
(docs/benchmarks.md), for formatting a handful of keys. Without a handler,
Python drops INFO records, so a job's `log.info(...)` would appear nowhere.

While a job runs, each of its records gets the run's fields in `json_fields`
(extra={"json_fields": {...}} adds a job's own fields the same way), under the
same names the handler's own per-request line uses: `jsonPayload.run_key="..."`
in the Logs Explorer shows one run's lines, the job's and the handler's alike.
The request's trace (from its `traceparent` or `X-Cloud-Trace-Context` header)
puts them under that request in the Logs Explorer too.

The fields live in a context variable, so they follow the job's own thread
only: a thread the job starts itself logs without them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TextIO

from runledger.sdk.context import RunContext

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
            "trigger": context.trigger,
        }
    )
    try:
        yield
    finally:
        _RUN_FIELDS.reset(token)


# Entry keys Cloud Logging reads from a structured line; a job's fields never override them.
_SPECIAL_KEYS = frozenset(
    {
        "severity",
        "httpRequest",
        "time",
        "timestamp",
        "timestampSeconds",
        "timestampNanos",
        "logging.googleapis.com/insertId",
        "logging.googleapis.com/labels",
        "logging.googleapis.com/operation",
        "logging.googleapis.com/sourceLocation",
        "logging.googleapis.com/spanId",
        "logging.googleapis.com/trace",
        "logging.googleapis.com/trace_sampled",
    }
)
# Cloud Trace "Trace context": traceparent is VERSION-TRACE_ID-PARENT_SPAN_ID-TRACE_FLAGS
# (hex; flag bit 1 = sampled); the older X-Cloud-Trace-Context is
# TRACE_ID/SPAN_ID;o=OPTIONS with a decimal span id. traceparent is preferred.
_TRACEPARENT = re.compile(r"^\s*[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_CLOUD_TRACE = re.compile(r"^\s*([0-9a-fA-F]{32})(?:/(\d+))?(?:;o=(\d))?")

Headers = Callable[[], Mapping[str, str] | None]


@dataclass(frozen=True)
class Trace:
    trace_id: str
    span_id: str | None
    sampled: bool


def request_trace(headers: Mapping[str, str]) -> Trace | None:
    """The trace a request belongs to, from its trace headers (case-insensitive mapping)."""
    if match := _TRACEPARENT.match(headers.get("traceparent") or ""):
        trace_id, span_id, flags = match.groups()
        if trace_id.strip("0") and span_id.strip("0"):
            return Trace(trace_id, span_id, bool(int(flags, 16) & 1))
    if match := _CLOUD_TRACE.match(headers.get("X-Cloud-Trace-Context") or ""):
        trace_id, span, option = match.groups()
        span_id = f"{int(span):016x}" if span and 0 < int(span) < 2**64 else None
        return Trace(trace_id.lower(), span_id, option == "1")
    return None


class JsonLineHandler(logging.StreamHandler):
    """Writes each record as one Cloud Logging structured line.

    `headers` returns the current request's headers (None outside a request)
    and `project` names the trace's project, so the line's trace is the full
    resource name Cloud Logging links to the request ("projects/P/traces/T").
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        headers: Headers | None = None,
        project: str | None = None,
    ) -> None:
        super().__init__(stream)
        self._headers = headers
        self._project = project
        self._text = logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "json_fields", None) or {}
        if isinstance(record.msg, Mapping):  # a dict message is the payload itself
            payload = {**record.msg, **fields}
            message = None
        else:
            payload = dict(fields)
            message = self._text.format(record)  # with the traceback, for Error Reporting
        entry: dict[str, Any] = {k: v for k, v in payload.items() if k not in _SPECIAL_KEYS}
        if message is not None:
            entry["message"] = message
        entry["severity"] = record.levelname
        labels = getattr(record, "labels", None) or {}
        entry["logging.googleapis.com/labels"] = {"python_logger": record.name, **labels}
        entry["logging.googleapis.com/sourceLocation"] = {
            "file": record.pathname,
            "line": record.lineno,
            "function": record.funcName,
        }
        entry.update(self._trace_keys())
        return json.dumps(entry, ensure_ascii=False, default=str)

    def _trace_keys(self) -> dict[str, Any]:
        headers = self._headers() if self._headers else None
        trace = request_trace(headers) if headers else None
        if trace is None:
            return {}
        name = f"projects/{self._project}/traces/{trace.trace_id}"
        keys: dict[str, Any] = {
            "logging.googleapis.com/trace": name if self._project else trace.trace_id,
            "logging.googleapis.com/trace_sampled": trace.sampled,
        }
        if trace.span_id:
            keys["logging.googleapis.com/spanId"] = trace.span_id
        return keys


def install(
    stream: TextIO | None = None, *, headers: Headers | None = None, project: str | None = None
) -> logging.Handler:
    """Send the root logger's INFO and above to stdout as structured entries; once per process.

    A second call (a test importing the entry point again) returns the handler
    already installed instead of doubling every line.
    """
    root = logging.getLogger()
    for handler in root.handlers:
        if any(isinstance(f, RunFieldsFilter) for f in handler.filters):
            return handler
    handler = JsonLineHandler(stream, headers=headers, project=project)
    handler.addFilter(RunFieldsFilter())
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return handler
