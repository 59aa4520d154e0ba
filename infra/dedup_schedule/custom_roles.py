"""The stack's custom IAM roles, each holding exactly the permissions one part of it calls.

Every predefined role covering them grants more, so the ledger's document access,
the audit's Scheduler listing and pause-log read, and a Cloud Run job target's start
are custom roles.
A role's id derives from the name prefix, so two stacks in one project keep their own.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_gcp as gcp

from dedup_schedule.placement import Placement


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
    """The GA custom role `<prefix>_<role_id>` in `project`, named `<prefix>-<suffix>`."""
    return gcp.projects.IAMCustomRole(
        place.name(suffix),
        gcp.projects.IAMCustomRoleArgs(
            project=project,
            role_id=place.prefix.replace("-", "_") + "_" + role_id,
            title=f"{place.prefix} {title}",
            description=description,
            permissions=list(permissions),
            stage="GA",
        ),
        opts=place.opts(parent),
    )
