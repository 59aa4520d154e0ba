"""What the schedule needs in the project itself: the APIs it calls and its service accounts."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

# APIs the stack calls, enabled by the stack itself. They stay enabled on destroy:
# other workloads in the project may rely on them.
REQUIRED_APIS = (
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "run.googleapis.com",
    "storage.googleapis.com",
)


def enable_apis(prefix: str, project: str, parent: pulumi.Resource) -> tuple[pulumi.Resource, ...]:
    """One `projects.Service` per required API, named `<prefix>-api-<service>`."""
    return tuple(
        gcp.projects.Service(
            f"{prefix}-api-{api.split('.')[0]}",
            gcp.projects.ServiceArgs(
                project=project,
                service=api,
                disable_on_destroy=False,
                disable_dependent_services=False,
            ),
            opts=pulumi.ResourceOptions(parent=parent),
        )
        for api in REQUIRED_APIS
    )


def service_account(
    prefix: str, project: str, role: str, description: str, opts: pulumi.ResourceOptions
) -> gcp.serviceaccount.Account:
    """The account `<prefix>-<role>`, registered as `<prefix>-<role>-sa`."""
    return gcp.serviceaccount.Account(
        f"{prefix}-{role}-sa",
        gcp.serviceaccount.AccountArgs(
            project=project,
            account_id=f"{prefix}-{role}",
            display_name=f"{prefix} {role}",
            description=description,
        ),
        opts=opts,
    )
