"""Defence in depth and log hygiene, through the real server.

The Scheduler headers authenticate nothing: the endpoint's protection is Cloud
Run IAM, and Cloud Run verifies the ID token before the request reaches the
container. IAM lets in anyone who holds run.invoker on the service - project
Owners and Editors, Cloud Run Admins and Invokers too, not only the Scheduler's
account. On top of that the handler, when the stack configures it, accepts only
a verified token whose email claim is an allowed invoker, and only the
configured project and region. When a request carries X-Serverless-Authorization,
that is the token Cloud Run checked and Authorization reaches the container
unverified, so a made-up Authorization naming the invoker account must not get
through. These tests prove each refusal is a 403 that writes nothing and runs
nothing, and that no token - or any part of one - ever reaches the logs.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import secrets
from pathlib import Path

import pytest

from runledger.ledger.memory_store import MemoryRunStore
from scheduler_dedup.localrun.emulator import FirestoreEmulator
from tests.handler.support import FakeClock, default_run_key, make_app, scheduler_headers
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

INVOKER = "scheduler-invoker@acme-prod.iam.gserviceaccount.com"
OTHER_INVOKER = "ci-deployer@acme-prod.iam.gserviceaccount.com"
STACK = {
    "DEDUP_ALLOWED_INVOKERS": INVOKER,
    "DEDUP_ALLOWED_PROJECTS": "acme-prod",
    "DEDUP_ALLOWED_REGIONS": "europe-west1",
}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def fake_token(email: str | None, signature: str) -> str:
    """An OIDC-shaped token; Cloud Run has checked the real one's signature already."""
    claims = {"aud": "https://handler.example", "iss": "https://accounts.google.com"}
    if email is not None:
        claims["email"] = email
    header = _b64(json.dumps({"alg": "RS256", "typ": "JWT"}).encode())
    return f"{header}.{_b64(json.dumps(claims).encode())}.{signature}"


@pytest.mark.firestore
@pytest.mark.timeout(120)
def test_only_the_configured_invoker_project_and_region_get_through(
    clean_emulator: FirestoreEmulator, fault_dir: Path, servers: Servers
) -> None:
    server = servers.start(server_env(clean_emulator, fault_dir, "rel_security") | STACK)
    when = schedule_time_now()
    signatures = [f"SIG{secrets.token_hex(24)}" for _ in range(10)]
    good_token = fake_token(INVOKER, signatures[0])
    # What Cloud Run verified for an owner, editor or Cloud Run invoker who is not the
    # Scheduler's account; the Authorization beside it is whatever the caller made up.
    insider_token = fake_token(OTHER_INVOKER, signatures[7])
    refused = {
        "no token": run_headers("probe", when),
        "not a bearer token": [
            *run_headers("probe", when),
            ("Authorization", "Basic dXNlcjpwdw=="),
        ],
        "malformed token": [
            *run_headers("probe", when),
            ("Authorization", f"Bearer not-a-jwt-{signatures[1]}"),
        ],
        "token without email": [
            *run_headers("probe", when),
            ("Authorization", f"Bearer {fake_token(None, signatures[2])}"),
        ],
        "other account": [
            *run_headers("probe", when),
            ("Authorization", f"Bearer {fake_token('attacker@evil.example', signatures[3])}"),
        ],
        "lookalike account": [
            *run_headers("probe", when),
            ("Authorization", f"Bearer {fake_token(INVOKER.upper(), signatures[4])}"),
        ],
        "two tokens": [
            *run_headers("probe", when),
            ("Authorization", f"Bearer {good_token}"),
            ("Authorization", f"Bearer {fake_token(INVOKER, signatures[5])}"),
        ],
        "right token, other project": [
            *run_headers("probe", when, project="acme-dev"),
            ("Authorization", f"Bearer {good_token}"),
        ],
        "right token, other region": [
            *run_headers("probe", when, region="us-central1"),
            ("Authorization", f"Bearer {good_token}"),
        ],
        "made-up Authorization beside another verified identity": [
            *run_headers("probe", when),
            ("X-Serverless-Authorization", f"Bearer {insider_token}"),
            ("Authorization", f"Bearer {good_token}"),
        ],
        "made-up Authorization beside a verified token without email": [
            *run_headers("probe", when),
            ("Authorization", f"Bearer {good_token}"),
            ("X-Serverless-Authorization", f"Bearer {fake_token(None, signatures[8])}"),
        ],
        "two serverless tokens": [
            *run_headers("probe", when),
            ("X-Serverless-Authorization", f"Bearer {good_token}"),
            ("X-Serverless-Authorization", f"Bearer {fake_token(INVOKER, signatures[9])}"),
        ],
        "huge token": [
            *run_headers("probe", when),
            ("Authorization", f"Bearer {fake_token('x@evil.example', 'S' * 6000 + signatures[6])}"),
        ],
    }
    for label, headers in refused.items():
        reply = deliver(server.url, headers)
        assert reply.status == 403, (label, reply)
        assert reply.outcome == "rejected" and reply.body["message"], label
    assert count_docs(clean_emulator, "rel_security") == 0, "a refusal wrote to the ledger"
    assert completed_work(fault_dir) == []

    genuine = {
        "only Authorization (what a Scheduler OIDC delivery sends)": [
            ("Authorization", f"Bearer {good_token}")
        ],
        "only X-Serverless-Authorization": [("x-serverless-authorization", f"Bearer {good_token}")],
        "X-Serverless-Authorization beside an application's own Authorization": [
            ("X-Serverless-Authorization", f"Bearer {good_token}"),
            ("Authorization", f"Bearer {insider_token}"),
        ],
    }
    for offset, (label, credentials) in enumerate(genuine.items()):
        headers = [*run_headers("probe", schedule_time_now(-60 * offset)), *credentials]
        allowed = deliver(server.url, headers)
        assert (allowed.status, allowed.outcome) == (200, "completed"), (label, allowed)
    assert len(completed_work(fault_dir)) == len(genuine)

    log = server.log()
    entries = log_entries(log)
    assert sum(e.get("status") == 403 for e in entries) == len(refused)
    for signature in signatures:
        assert signature not in log, "a token signature reached the log"
    for token_part in good_token.split("."):
        assert token_part not in log, "a part of the token reached the log"
    for token_part in insider_token.split("."):
        assert token_part not in log, "a part of the token reached the log"
    assert "Bearer" not in log and INVOKER not in log and OTHER_INVOKER not in log
    assert all(len(line) <= 4096 for line in log.splitlines())


def test_every_log_line_is_bounded_whatever_the_job_raises() -> None:
    """A job error carrying a secret-sized blob is cut in the log and in the record."""
    blob = "secret=" + "k" * 50_000

    def job(ctx) -> None:
        raise RuntimeError(blob)

    store = FaultyStore(MemoryRunStore())
    app = make_app(store, {"nightly-report": job}, FakeClock())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        reply = app.handle("POST", scheduler_headers(), b"")
    assert (reply.status, reply.outcome) == (500, "failed_retryable")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 4096
    assert blob not in lines[0]
    record = store.inner.get(default_run_key(app)).record
    assert record.error is not None and len(record.error) <= 1000
