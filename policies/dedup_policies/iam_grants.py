"""Reading who gets which role out of any IAM member, binding or policy resource.

pulumi-gcp has three shapes for every IAM surface (`member`, `members`, and a
JSON `policyData`); rules about public access and role breadth want the same
flat list of (role, member) pairs from all of them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pulumi_policy.proxy import UnknownValueError

from dedup_policies.props import as_list, as_text, get_path

PUBLIC_MEMBERS = frozenset({"allUsers", "allAuthenticatedUsers"})


def _known_text(props: Any, key: str) -> str | None:
    try:
        return as_text(get_path(props, key))
    except UnknownValueError:
        return None


def grants(props: Any) -> list[tuple[str, str]]:
    """(role, member) pairs of an IAM member, binding or policy resource.

    A role or member that is unknown at preview time is another resource's
    output (an account's `member`, a custom role's `name`), never a literal
    such as `allUsers` or `roles/editor`, so it is left out here rather than
    stopping the rule. An unknown `policyData` does stop it: it could hold
    anything. Unparseable `policyData` yields nothing (the provider rejects it).
    """
    role = _known_text(props, "role") or ""
    pairs = []
    member = _known_text(props, "member")
    if member:
        pairs.append((role, member))
    try:
        members = get_path(props, "members")
    except UnknownValueError:
        members = None
    if isinstance(members, Sequence) and not isinstance(members, str):
        for index in range(len(members)):
            try:
                item = members[index]
            except UnknownValueError:
                continue
            if isinstance(item, str):
                pairs.append((role, item))
    policy_data = as_text(get_path(props, "policyData"))
    if policy_data:
        try:
            document = json.loads(policy_data)
        except ValueError:
            document = {}
        for binding in as_list(get_path(document, "bindings")):
            binding_role = as_text(get_path(binding, "role")) or ""
            for m in as_list(get_path(binding, "members")):
                if isinstance(m, str):
                    pairs.append((binding_role, m))
    return pairs
