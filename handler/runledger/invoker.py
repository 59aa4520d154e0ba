"""Defence in depth: accept only tokens minted for the stack's invoker account.

Cloud Run has already verified the OIDC token's signature and audience before
the request reaches the container (and replaced the signature), so only the
claims are read here; the endpoint's real protection stays Cloud Run IAM.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable

from runledger.delivery import header_values
from runledger.exceptions import BadRequest


def token_email(headers: Iterable[tuple[str, str]]) -> str | None:
    values = header_values(headers, "Authorization")
    if len(values) != 1 or not values[0].startswith("Bearer "):
        return None
    parts = values[0].removeprefix("Bearer ").strip().split(".")
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
        raise BadRequest("no OIDC token with an email claim", status=403)
    if email not in allowed:
        raise BadRequest("caller is not an allowed invoker", status=403)
