"""Job log lines: one Cloud Logging structured entry each, with the run's fields and trace.

The keys are the ones Cloud Logging reads from a JSON line on stdout (its
"Structured logging" page, special JSON fields) and google-cloud-logging's
StructuredLogHandler writes; the request's trace comes from its traceparent
or X-Cloud-Trace-Context header (Cloud Trace, "Trace context").
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from runledger.sdk.joblog import JsonLineHandler, RunFieldsFilter, run_fields

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
RUN = SimpleNamespace(
    run_id="nightly-report@2026-10-16T12:00:00Z",
    job_name="nightly-report",
    schedule_time=datetime(2026, 10, 16, 12, tzinfo=UTC),
    attempt_id="attempt-1",
    trigger="backfill",
)


class Lines:
    def __init__(self) -> None:
        self.stream = io.StringIO()
        self.headers: Mapping[str, str] | None = None

    def entries(self) -> list[dict]:
        return [json.loads(line) for line in self.stream.getvalue().splitlines()]


@pytest.fixture
def lines() -> Iterator[Lines]:
    captured = Lines()
    handler = JsonLineHandler(captured.stream, headers=lambda: captured.headers, project="acme")
    handler.addFilter(RunFieldsFilter())
    logger = logging.getLogger("tests.joblog.job")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield captured
    finally:
        logger.removeHandler(handler)


def job_log() -> logging.Logger:
    return logging.getLogger("tests.joblog.job")


def test_a_job_line_has_severity_message_run_fields_labels_and_source(lines):
    with run_fields(RUN):
        job_log().info("exported %d invoices", 3)
    [entry] = lines.entries()
    assert entry["severity"] == "INFO"
    assert entry["message"] == "exported 3 invoices"
    assert entry["run_key"] == RUN.run_id
    assert entry["job"] == "nightly-report"
    assert entry["schedule_time"] == "2026-10-16T12:00:00+00:00"
    assert entry["attempt_id"] == "attempt-1"
    assert entry["trigger"] == "backfill"
    assert entry["logging.googleapis.com/labels"] == {"python_logger": "tests.joblog.job"}
    source = entry["logging.googleapis.com/sourceLocation"]
    assert source["file"] == __file__
    assert source["function"] == "test_a_job_line_has_severity_message_run_fields_labels_and_source"
    assert isinstance(source["line"], int)
    assert "logging.googleapis.com/trace" not in entry  # no request, no trace


def test_the_requests_traceparent_names_the_trace_span_and_sampling(lines):
    lines.headers = {"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}
    with run_fields(RUN):
        job_log().info("step")
    [entry] = lines.entries()
    assert entry["logging.googleapis.com/trace"] == f"projects/acme/traces/{TRACE_ID}"
    assert entry["logging.googleapis.com/spanId"] == "00f067aa0ba902b7"
    assert entry["logging.googleapis.com/trace_sampled"] is True


def test_the_legacy_cloud_trace_header_gives_a_hex_span_id(lines):
    lines.headers = {"X-Cloud-Trace-Context": f"{TRACE_ID}/123;o=0"}
    with run_fields(RUN):
        job_log().info("step")
    [entry] = lines.entries()
    assert entry["logging.googleapis.com/trace"] == f"projects/acme/traces/{TRACE_ID}"
    assert entry["logging.googleapis.com/spanId"] == f"{123:016x}"
    assert entry["logging.googleapis.com/trace_sampled"] is False


def test_a_malformed_trace_header_adds_no_trace(lines):
    lines.headers = {"traceparent": "garbage", "X-Cloud-Trace-Context": "not-a-trace"}
    with run_fields(RUN):
        job_log().warning("step")
    [entry] = lines.entries()
    assert not any(key.startswith("logging.googleapis.com/trace") for key in entry)
    assert entry["severity"] == "WARNING"


def test_an_exception_keeps_its_traceback_in_the_message(lines):
    with run_fields(RUN):
        try:
            raise ValueError("bad ledger row 7")
        except ValueError:
            job_log().exception("export failed")
    [entry] = lines.entries()
    assert entry["severity"] == "ERROR"
    assert entry["message"].startswith("export failed\nTraceback (most recent call last):")
    assert "ValueError: bad ledger row 7" in entry["message"]


def test_a_jobs_own_fields_join_the_payload_but_never_replace_the_entrys_keys(lines):
    own = {"invoices": 3, "severity": "DEBUG", "logging.googleapis.com/trace": "forged"}
    with run_fields(RUN):
        job_log().info("done", extra={"json_fields": own, "labels": {"team": "billing"}})
        job_log().info({"stage": "upload", "bytes": 10})
    first, second = lines.entries()
    assert (first["invoices"], first["severity"], first["run_key"]) == (3, "INFO", RUN.run_id)
    assert "logging.googleapis.com/trace" not in first
    assert first["logging.googleapis.com/labels"] == {
        "python_logger": "tests.joblog.job",
        "team": "billing",
    }
    assert (second["stage"], second["bytes"], second["run_key"]) == ("upload", 10, RUN.run_id)
    assert "message" not in second


def test_outside_a_run_only_warnings_and_above_are_written(lines):
    job_log().info("a web server's access line")
    job_log().warning("disk almost full")
    assert [entry["message"] for entry in lines.entries()] == ["disk almost full"]
    assert "run_key" not in lines.entries()[0]
