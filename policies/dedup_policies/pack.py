"""The pack's identity and its full list of policies, without starting it.

`pulumi_policy.PolicyPack(...)` serves gRPC and never returns, so it is only
constructed in the pack's `__main__.py`, from `pack_arguments()`. Tests import
`policies()` and `pack_arguments()` directly; the offline checker
(`scheduler_dedup.offline.pack_loader`) runs the pack's `__main__.py` itself, with `PolicyPack`
replaced by a recorder, so it checks exactly what the CLI would load, also for an
edited copy of the pack.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import EnforcementLevel, Policy

from dedup_policies import (
    alert_rules,
    cloudrun_rules,
    dst_rules,
    iam_rules,
    ingress_rules,
    region_rules,
    scheduler_rules,
    stack_rules,
)

PACK_NAME = "gcp-scheduler-dedup"
PACK_DESCRIPTION = (
    "Guards for deduplicated Cloud Scheduler -> Cloud Run schedules: unix-cron jobs with "
    "OIDC auth and dedup headers, private handlers with their own service account, a ledger "
    "whose lease, retention and Firestore TTL match the jobs, and least-privilege IAM."
)


def policies() -> list[Policy]:
    """Every policy of the pack, in report order (fresh list; the policies are shared)."""
    return [
        *scheduler_rules.POLICIES,
        *dst_rules.POLICIES,
        *cloudrun_rules.POLICIES,
        *stack_rules.POLICIES,
        *region_rules.POLICIES,
        *iam_rules.POLICIES,
        *ingress_rules.POLICIES,
        *alert_rules.POLICIES,
    ]


def pack_arguments() -> dict[str, Any]:
    """Keyword arguments for `PolicyPack`; each policy carries its own default level."""
    return {
        "name": PACK_NAME,
        "description": PACK_DESCRIPTION,
        "policies": policies(),
        "enforcement_level": EnforcementLevel.ADVISORY,
        "display_name": "Cloud Scheduler dedup on GCP",
        "provider": "gcp",
        "tags": ["gcp", "cloud-scheduler", "cloud-run", "firestore", "iam"],
    }
