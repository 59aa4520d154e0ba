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
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable

from runledger.delivery import header_values
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


def token_email(headers: Iterable[tuple[str, str]]) -> str | None:
    """The email claim of the ID token Cloud Run verified, if there is exactly one."""
    credential = _verified_credential(headers)
    if credential is None or not credential.startswith("Bearer "):
        return None
    parts = credential.removeprefix("Bearer ").strip().split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return None
    email = claims.get("email") if isinstance(claims, dict) else None
    return email if isinstance(email, str) else None


def check_invoker(headers: Iterable[tuple[str, str]], allowed: frozenset[str]) -> None:
    if not allowed:
        return
    email = token_email(headers)
    if email is None:
        raise BadRequest("no verified OIDC token with an email claim", status=403)
    if email not in allowed:
        raise BadRequest("caller is not an allowed invoker", status=403)
