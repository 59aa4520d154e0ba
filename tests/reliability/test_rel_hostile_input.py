"""Hostile and malformed deliveries: each gets a 4xx with a reason, writes nothing,
and never takes the process down.

The in-process part lets hypothesis mutate an otherwise valid delivery (headers
missing, empty, repeated, huge, non-UTF-8, control characters, unicode; schedule
times malformed, out of range, leap seconds, far past, far future; job names with
`/`; other methods; oversized bodies) and checks every answer against a store that
counts each primitive call. The real-server part sends the same kinds of input over
raw HTTP, where the web server's own limits (header size, latin-1 decoding) also act.
"""

from __future__ import annotations

import contextlib
import io
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runledger.ledger.memory_store import MemoryRunStore
from runledger.service.app import MAX_BODY_BYTES
from scheduler_dedup.localrun.emulator import FirestoreEmulator
from tests.handler.support import FakeClock, make_app
from tests.reliability.relsupport import (
    FaultyStore,
    Servers,
    completed_work,
    count_docs,
    deliver,
    log_entries,
    run_headers,
    schedule_time_now,
    server_env,
)

JOB = "nightly-report"
JOB_H, TIME_H, PROJECT_H, REGION_H = (
    "X-CloudScheduler-JobName",
    "X-CloudScheduler-ScheduleTime",
    "X-Dedup-Project",
    "X-Dedup-Region",
)
VALID = {
    JOB_H: JOB,
    TIME_H: "2026-10-16T12:00:00Z",
    PROJECT_H: "acme-prod",
    REGION_H: "europe-west1",
}
# The project and region the stack configured: any other value is refused (403).
STACK = {"DEDUP_ALLOWED_PROJECTS": "acme-prod", "DEDUP_ALLOWED_REGIONS": "europe-west1"}
# The longest log line we accept: a handful of fields bounded at 300 characters each.
MAX_LOG_LINE = 4096

BAD_TIMES = [
    "",
    "now",
    "2026-10-16",
    "2026-10-16 12:00:00Z",
    "2026-10-16T12:00:00",  # no offset
    "2026-13-01T00:00:00Z",  # month out of range
    "2026-02-30T00:00:00Z",
    "2026-10-16T24:00:00Z",
    "2026-10-16T12:00:60Z",  # leap second
    "2016-12-31T23:59:60Z",  # a real leap second
    "2026-10-16T12:00:00+24:00",
    "2026-10-16T12:00:00+05:60",
    "0000-01-01T00:00:00Z",
    "9999-12-31T23:59:59-23:59",  # past datetime.max once normalised
    "1970-01-01T00:00:00Z",  # far past: older than the retention
    "2999-01-01T00:00:00Z",  # far future: beyond any yearly job
    "2026-10-16T12:00:00.1234567890Z",
    "2026-10-16T12:00:00Z\x00",
    "\uff12\uff10\uff12\uff16-10-16T12:00:00Z",  # fullwidth digits
    "2026-10-16T12:00:00Z" * 500,
    "2026-10-16T12:00:00\udcff",
]
BAD_JOBS = [
    "",
    "   ",
    "projects/p/locations/l/jobs/nightly-report",
    "nightly/report",
    "../nightly-report",
    "nightly\nreport",
    "nightly-report\x00",
    "nightly\x1b[31mreport",
    "nïghtly-report",
    "夜間レポート",
    "nightly-report\u202e",
    "a" * 501,
    "unknown-job",
    "NIGHTLY-REPORT",
]
BAD_IDS = ["", "evil project", "acme/prod", "acme\x00prod", "ácme", "a" * 101, "x\r\ny"]
METHODS = ["GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT", "FOO"]


def _mutated(headers: dict[str, str], field: str, value: str | None) -> list[tuple[str, str]]:
    items = [(name, val) for name, val in headers.items() if name != field]
    if value is not None:
        items.append((field, value))
    return items


hostile_text = st.one_of(
    st.text(max_size=60),
    st.text(alphabet=string.printable, max_size=60),
    st.binary(max_size=60).map(lambda raw: raw.decode("latin-1")),  # as a server decodes bytes
    st.binary(max_size=60).map(lambda raw: raw.decode("utf-8", "surrogateescape")),
    st.sampled_from(["x" * 10_000, "\x00" * 50, "\u2028", " ", "\t"]),
)


@st.composite
def hostile_deliveries(draw: st.DrawFn) -> tuple[str, list[tuple[str, str]], bytes]:
    """A valid delivery with at least one field broken in a way that can never be valid."""
    kind = draw(
        st.sampled_from(
            ["missing", "empty", "repeated", "bad_time", "bad_job", "bad_id", "method", "body"]
        )
    )
    method, body = "POST", b""
    headers = dict(VALID)
    if kind == "missing":
        field = draw(st.sampled_from(sorted(VALID)))
        items = _mutated(headers, field, None)
    elif kind == "empty":
        field = draw(st.sampled_from(sorted(VALID)))
        items = _mutated(headers, field, draw(st.sampled_from(["", " ", "\t"])))
    elif kind == "repeated":
        field = draw(st.sampled_from(sorted(VALID)))
        again = draw(st.sampled_from([VALID[field], draw(hostile_text)]))
        case = draw(st.sampled_from([str.lower, str.upper, str]))
        items = [*headers.items(), (case(field), again)]
    elif kind == "bad_time":
        value = draw(st.one_of(st.sampled_from(BAD_TIMES), hostile_text))
        items = _mutated(headers, TIME_H, value)
    elif kind == "bad_job":
        value = draw(
            st.one_of(st.sampled_from(BAD_JOBS), hostile_text.filter(lambda v: v.strip() != JOB))
        )
        items = _mutated(headers, JOB_H, value)
    elif kind == "bad_id":
        field = draw(st.sampled_from([PROJECT_H, REGION_H]))
        value = draw(
            st.one_of(
                st.sampled_from(BAD_IDS),
                hostile_text.filter(lambda v: v.strip() not in (VALID[PROJECT_H], VALID[REGION_H])),
            )
        )
        items = _mutated(headers, field, value)
    elif kind == "method":
        method = draw(st.sampled_from(METHODS))
        items = list(headers.items())
    else:
        items = list(headers.items())
        body = b"\x00" * (MAX_BODY_BYTES + draw(st.integers(1, 4096)))
    # Unrelated hostile headers may ride along, but never a valid-looking duplicate.
    noise = draw(
        st.lists(st.tuples(st.sampled_from(["X-Junk", "Cookie"]), hostile_text), max_size=3)
    )
    return method, items + noise, body


def _still_valid_by_accident(method: str, items: list[tuple[str, str]], body: bytes) -> bool:
    """An ASCII-strict oracle, independent of the handler's parser, for the random cases."""
    if method != "POST" or len(body) > MAX_BODY_BYTES:
        return False
    seen: dict[str, list[str]] = {}
    for name, value in items:
        seen.setdefault(name.lower(), []).append(value)
    if TIME_H.lower() not in seen:  # a forced run may omit it: valid, keyed by arrival
        seen[TIME_H.lower()] = [VALID[TIME_H]]
    for name, valid in VALID.items():
        values = seen.get(name.lower(), [])
        if len(values) != 1:
            return False
        if name == TIME_H:
            continue
        if values[0].strip() != valid:
            return False
    value = seen[TIME_H.lower()][0].strip()
    return (
        value.isascii() and value[:4].isdigit() and value[4:5] == "-" and "60" not in value[17:19]
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(delivery=hostile_deliveries())
def test_hostile_delivery_is_refused_with_a_reason_and_writes_nothing(delivery) -> None:
    method, items, body = delivery
    store = FaultyStore(MemoryRunStore())
    ran: list[str] = []
    app = make_app(store, {JOB: lambda ctx: ran.append(ctx.run_id)}, FakeClock(), **STACK)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        reply = app.handle(method, items, body)
    if _still_valid_by_accident(method, items, body) and reply.status == 200:
        return  # e.g. a noise header that happens to be harmless; nothing hostile left
    assert 400 <= reply.status < 500, (reply, items)
    assert reply.outcome == "rejected"
    assert reply.message and len(reply.message) <= 400
    assert reply.message.isprintable(), "a reason line never carries raw control characters"
    assert ran == []
    assert store.calls == {}, "a refused delivery must not even touch the ledger"
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= MAX_LOG_LINE
    assert log_entries(lines[0])[0]["status"] == reply.status


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (TIME_H, "2016-12-31T23:59:60Z", 400),
        # Unicode digits that int() would happily read: RFC 3339 digits are ASCII only.
        (TIME_H, "\uff12\uff10\uff12\uff16-10-16T12:00:00Z", 400),
        (TIME_H, "2026-10-16T12:00:00+\u0660\u0660:00", 400),
        (TIME_H, "1970-01-01T00:00:00Z", 400),
        (TIME_H, "2999-01-01T00:00:00Z", 400),
        (TIME_H, "9999-12-31T23:59:59-23:59", 400),
        (JOB_H, "projects/p/locations/l/jobs/nightly-report", 400),
        (JOB_H, "unknown-job", 404),
    ],
)
def test_each_class_of_bad_input_gets_its_own_status_and_reason(
    name: str, value: str, expected: int
) -> None:
    store = FaultyStore(MemoryRunStore())
    app = make_app(store, {JOB: lambda ctx: None}, FakeClock(), **STACK)
    with contextlib.redirect_stdout(io.StringIO()):
        reply = app.handle("POST", _mutated(VALID, name, value), b"")
    assert reply.status == expected
    assert name in reply.message or "job" in reply.message
    assert store.calls == {}


# --- through the real server ------------------------------------------------------------


@pytest.mark.firestore
@pytest.mark.timeout(120)
def test_real_server_refuses_hostile_http_and_keeps_serving(
    clean_emulator: FirestoreEmulator, fault_dir: Path, servers: Servers
) -> None:
    server = servers.start(server_env(clean_emulator, fault_dir, "rel_hostile"))
    good = run_headers("probe", schedule_time_now())
    valid = dict(good)

    def without(field: str) -> list:
        return [(k, v) for k, v in good if k != field]

    cases: list[tuple[str, str, list, bytes]] = [
        ("missing job header", "POST", without(JOB_H), b""),
        ("empty schedule time", "POST", [*without(TIME_H), (TIME_H, "")], b""),
        ("repeated job header", "POST", [*good, (JOB_H.lower(), "probe")], b""),
        ("non-UTF-8 job name", "POST", [*without(JOB_H), (JOB_H, b"pr\xffobe\xc3")], b""),
        ("non-UTF-8 time", "POST", [*without(TIME_H), (TIME_H, b"2026-10-16T12:00:00\xffZ")], b""),
        ("control chars", "POST", [*without(JOB_H), (JOB_H, "pro\x01be\x7f")], b""),
        ("slash in job", "POST", [*without(JOB_H), (JOB_H, "jobs/probe")], b""),
        ("unicode job", "POST", [*without(JOB_H), (JOB_H, "prøbe".encode())], b""),
        ("leap second", "POST", [*without(TIME_H), (TIME_H, "2016-12-31T23:59:60Z")], b""),
        ("far past", "POST", [*without(TIME_H), (TIME_H, "1970-01-01T00:00:00Z")], b""),
        ("far future", "POST", [*without(TIME_H), (TIME_H, "2999-01-01T00:00:00Z")], b""),
        ("huge header", "POST", [*without(JOB_H), (JOB_H, "p" * 9000)], b""),
        ("huge unrelated header", "POST", [*good, ("X-Junk", "j" * 100_000)], b""),
        ("many headers", "POST", [*good, *[(f"X-N{i}", "v") for i in range(200)]], b""),
        ("oversized body", "POST", good, b"\x00" * (MAX_BODY_BYTES + 1)),
        *[(f"method {m}", m, good, b"") for m in ("GET", "PUT", "DELETE", "PATCH", "OPTIONS")],
    ]
    for label, method, headers, body in cases:
        reply = deliver(server.url, headers, body=body, method=method, timeout_s=30)
        assert 400 <= reply.status < 500, (label, reply.status, reply.raw[:200])
        assert server.process.poll() is None, f"{label}: the handler process died"
    assert count_docs(clean_emulator, "rel_hostile") == 0
    assert completed_work(fault_dir) == []

    # Still healthy: the valid delivery after all of that runs once.
    done = deliver(server.url, list(valid.items()))
    assert (done.status, done.outcome) == (200, "completed")
    assert len(completed_work(fault_dir)) == 1
    for line in server.log().splitlines():
        assert len(line) <= MAX_LOG_LINE, line[:200]


@pytest.mark.parametrize(
    ("name", "value"),
    [(TIME_H, v) for v in BAD_TIMES]
    + [(JOB_H, v) for v in BAD_JOBS]
    + [(PROJECT_H, v) for v in BAD_IDS]
    + [(REGION_H, v) for v in BAD_IDS],
)
def test_every_listed_bad_value_is_refused_without_touching_the_ledger(name: str, value: str):
    """The hand-picked cases, each checked every run (the fuzz above samples them)."""
    store = FaultyStore(MemoryRunStore())
    app = make_app(store, {JOB: lambda ctx: None}, FakeClock(), **STACK)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        reply = app.handle("POST", _mutated(VALID, name, value), b"")
    assert 400 <= reply.status < 500 and reply.outcome == "rejected"
    assert reply.message.isprintable() and len(reply.message) <= 400
    assert store.calls == {}
    assert all(len(line) <= MAX_LOG_LINE for line in out.getvalue().splitlines())
