"""The stack's custom IAM roles, each holding exactly the permissions one part of it calls.

Every predefined role covering them grants more, so the ledger's document access,
the audit's Scheduler listing and pause-log read, and a Cloud Run job target's start
are custom roles.

A role's id is `<prefix>_<name>_<created>`: the prefix keeps two stacks in one
project apart, and `<created>` is when this stack first created the role (base 36
seconds, from a `pulumiverse_time.Static`, which keeps its timestamp in the stack's
state and takes a new one only when it is created again). IAM keeps a deleted
custom role for 7 days, when it can be undeleted, and then deletes it for good
(IAM REST `projects.roles.delete`); its id cannot be used again until about 37
days after the delete ("Create and manage custom roles", deleting a custom role).
The provider undeletes a role it finds soft-deleted under the id it creates
(terraform-provider-google google/services/resourcemanager/
resource_google_project_iam_custom_role.go, the create function's `if r.Deleted`
branch), so a fixed id made `pulumi up` 8 to 37 days after a `pulumi destroy` fail.
After a destroy the Static is gone too, so the next `up` creates roles under new
ids, whatever the time since; an `up` on a living stack keeps the ids it has.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_gcp as gcp
import pulumiverse_time as time

from dedup_schedule.placement import Placement

_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def base36(number: int) -> str:
    """`number` (>= 0) in lower-case base 36: a role id takes letters, digits, `_` and `.`."""
    text = ""
    while True:
        number, digit = divmod(number, 36)
        text = _DIGITS[digit] + text
        if not number:
            return text


def custom_role(
    place: Placement,
    parent: pulumi.Resource,
    suffix: str,
    project: str,
    role_id: str,
    title: str,
    description: str,
    permissions: Sequence[str],
) -> gcp.projects.IAMCustomRole:
    """The GA custom role `<prefix>_<role_id>_<created>` in `project`, named `<prefix>-<suffix>`."""
    created = time.Static(place.name(f"{suffix}-created"), opts=place.opts(parent))
    stem = place.prefix.replace("-", "_") + "_" + role_id
    return gcp.projects.IAMCustomRole(
        place.name(suffix),
        gcp.projects.IAMCustomRoleArgs(
            project=project,
            role_id=created.unix.apply(lambda unix: f"{stem}_{base36(int(unix))}"),
            title=f"{place.prefix} {title}",
            description=description,
            permissions=list(permissions),
            stage="GA",
        ),
        opts=place.opts(parent),
    )
