"""The invoker check reads the verified ID token's `email` or `sub` claim."""

from __future__ import annotations

import base64
import json

import pytest

from runledger.ledger.memory_store import MemoryRunStore
from tests.handler.support import FakeClock, deliver, make_app, scheduler_headers

INVOKER = "dedup-invoker@acme-prod.iam.gserviceaccount.com"
INVOKER_ID = "112233445566778899001"
STACK = {"DEDUP_ALLOWED_INVOKERS": INVOKER, "DEDUP_ALLOWED_INVOKER_IDS": INVOKER_ID}


def _token(**claims: str) -> str:
    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256'})}.{part({'aud': 'https://h.example', **claims})}.SIG"


@pytest.mark.parametrize(
    ("claims", "status", "outcome"),
    [
        ({"sub": INVOKER_ID}, 200, "completed"),  # a token without the optional email
        ({"email": INVOKER, "sub": "999"}, 200, "completed"),
        ({"sub": "999"}, 403, "rejected"),
        ({"email": "someone@acme-prod.iam.gserviceaccount.com", "sub": "999"}, 403, "rejected"),
        ({"iss": "https://accounts.google.com"}, 403, "rejected"),
    ],
)
def test_the_invoker_is_known_by_email_or_by_unique_id(claims, status, outcome):
    ran: list[str] = []
    app = make_app(MemoryRunStore(), {"nightly-report": ran.append}, FakeClock(), **STACK)
    headers = [*scheduler_headers(), ("Authorization", f"Bearer {_token(**claims)}")]
    reply = deliver(app, headers)
    assert (reply.status, reply.outcome) == (status, outcome)
    assert len(ran) == (status == 200)


def test_a_token_naming_nobody_says_which_claims_count():
    app = make_app(MemoryRunStore(), {"nightly-report": print}, FakeClock(), **STACK)
    reply = deliver(app, [*scheduler_headers(), ("Authorization", f"Bearer {_token()}")])
    assert (reply.status, reply.message) == (
        403,
        "no verified OIDC token with an email or sub claim",
    )
