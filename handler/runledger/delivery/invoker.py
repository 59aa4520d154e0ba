"""Defence in depth: accept only the identity Cloud Run verified, and only allowed accounts.

Cloud Run IAM lets through anyone holding `run.invoker` on the service, not only
the Scheduler's account: by default project Owners and Editors, Cloud Run Admins
and Cloud Run Invokers ("Authentication overview", Cloud Run docs). It checks the
ID token's signature and audience before the request reaches the container (and
removes the signature), so only the claims are read here.

Which header it checked matters: a caller may send its ID token in
`X-Serverless-Authorization` instead of `Authorization`, and when both are
present Cloud Run checks only `X-Serverless-Authorization` and hands
`Authorization` to the container unverified ("Authenticating service-to-service",
section "Acquire the token"; confirmed by the Cloud Run team in
GoogleCloudPlatform/cloud-run-proxy#25). So the identity is read from
`X-Serverless-Authorization` whenever it is present, and `Authorization` counts
only when it is the sole credential - what a Scheduler OIDC delivery sends.

Which claim names the caller: a Google-signed ID token always carries `sub`,
"an identifier for the user, unique among all Google accounts and never
reused" (Google Identity, "OpenID Connect", ID token claims); for a service
account that is its unique id. The `email` claim is optional: a service
account's ID token holds it only when asked for ("includeEmail: ... If set to
true, the token will contain email and email_verified claims", IAM Credentials
API, `projects.serviceAccounts.generateIdToken`), and Cloud Scheduler's docs do
not say which its tokens carry. So the accounts are listed by email
(DEDUP_ALLOWED_INVOKERS) and by unique id (DEDUP_ALLOWED_INVOKER_IDS; the Pulumi
program writes both), and a token is accepted when its `email` is among the
first or its `sub` among the second.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable

from runledger.delivery.identify import header_values
from runledger.exceptions import BadRequest

SERVERLESS_AUTHORIZATION = "X-Serverless-Authorization"
AUTHORIZATION = "Authorization"


def _verified_credential(headers: Iterable[tuple[str, str]]) -> str | None:
    """The one credential header Cloud Run checked, or None when that is unclear."""
    headers = list(headers)
    serverless = header_values(headers, SERVERLESS_AUTHORIZATION)
    if serverless:
        return serverless[0] if len(serverless) == 1 else None
    plain = header_values(headers, AUTHORIZATION)
    return plain[0] if len(plain) == 1 else None


def _claim(claims: object, name: str) -> str | None:
    value = claims.get(name) if isinstance(claims, dict) else None
    return value if isinstance(value, str) and value else None


def token_identity(headers: Iterable[tuple[str, str]]) -> tuple[str | None, str | None]:
    """The `email` and `sub` claims of the ID token Cloud Run verified, if there is exactly one."""
    credential = _verified_credential(headers)
    if credential is None or not credential.startswith("Bearer "):
        return None, None
    parts = credential.removeprefix("Bearer ").strip().split(".")
    if len(parts) != 3:
        return None, None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return None, None
    return _claim(claims, "email"), _claim(claims, "sub")


def check_invoker(
    headers: Iterable[tuple[str, str]],
    allowed: frozenset[str],
    allowed_ids: frozenset[str] = frozenset(),
) -> None:
    """Refuse (403) a caller whose token names no allowed account by email or unique id."""
    if not allowed and not allowed_ids:
        return
    email, subject = token_identity(headers)
    if email is None and subject is None:
        raise BadRequest("no verified OIDC token with an email or sub claim", status=403)
    if email not in allowed and subject not in allowed_ids:
        raise BadRequest("caller is not an allowed invoker", status=403)
