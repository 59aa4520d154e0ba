"""Pulumi type tokens (pulumi-gcp 10.x) the rules look at.

Kept in one place so a provider upgrade that renames a token is one edit, and
so every rule matches on exactly the same spelling the engine sends.
"""

from __future__ import annotations

SCHEDULER_JOB = "gcp:cloudscheduler/job:Job"

FUNCTION_V2 = "gcp:cloudfunctionsv2/function:Function"
RUN_SERVICE_V2 = "gcp:cloudrunv2/service:Service"
RUN_SERVICE_V1 = "gcp:cloudrun/service:Service"
HANDLER_TYPES = frozenset({FUNCTION_V2, RUN_SERVICE_V2, RUN_SERVICE_V1})
# Cloud Functions 1st gen: an HTTP endpoint too, but never the dedup handler.
FUNCTION_V1 = "gcp:cloudfunctions/function:Function"
# Every serverless type that serves HTTP and runs as a service account.
ENDPOINT_TYPES = HANDLER_TYPES | {FUNCTION_V1}

# IAM on the invoked service: member/binding/policy for each API generation.
INVOKER_IAM_TYPES = frozenset(
    {
        "gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
        "gcp:cloudrunv2/serviceIamBinding:ServiceIamBinding",
        "gcp:cloudrunv2/serviceIamPolicy:ServiceIamPolicy",
        "gcp:cloudfunctionsv2/functionIamMember:FunctionIamMember",
        "gcp:cloudfunctionsv2/functionIamBinding:FunctionIamBinding",
        "gcp:cloudfunctionsv2/functionIamPolicy:FunctionIamPolicy",
        "gcp:cloudrun/iamMember:IamMember",
        "gcp:cloudrun/iamBinding:IamBinding",
        "gcp:cloudrun/iamPolicy:IamPolicy",
        "gcp:cloudfunctions/functionIamMember:FunctionIamMember",
        "gcp:cloudfunctions/functionIamBinding:FunctionIamBinding",
        "gcp:cloudfunctions/functionIamPolicy:FunctionIamPolicy",
    }
)
# 1st gen functions are invoked with roles/cloudfunctions.invoker, not roles/run.invoker.
FUNCTION_V1_IAM_TYPES = frozenset(
    t for t in INVOKER_IAM_TYPES if t.startswith("gcp:cloudfunctions/")
)

FIRESTORE_FIELD = "gcp:firestore/field:Field"
FIRESTORE_DATABASE = "gcp:firestore/database:Database"

SERVICE_ACCOUNT = "gcp:serviceaccount/account:Account"
CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"

PROJECT_IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
PROJECT_IAM_BINDING = "gcp:projects/iAMBinding:IAMBinding"
PROJECT_IAM_POLICY = "gcp:projects/iAMPolicy:IAMPolicy"
PROJECT_IAM_TYPES = frozenset({PROJECT_IAM_MEMBER, PROJECT_IAM_BINDING, PROJECT_IAM_POLICY})


def is_iam_grant(resource_type: str) -> bool:
    """True for any pulumi-gcp IAM member/binding/policy resource, whatever the service.

    pulumi-gcp spells them `…/iAMMember:IAMMember`, `…/serviceIamMember:…`,
    `…/iamBinding:…` and so on; the module part always contains "iam".
    """
    if not resource_type.startswith("gcp:") or resource_type.count(":") != 2:
        return False
    module = resource_type.split(":")[1].split("/")[-1].lower()
    return "iam" in module and module.endswith(("member", "binding", "policy"))


# Cloud Logging log-based metrics and Cloud Monitoring alert policies (alerting rules).
LOG_METRIC = "gcp:logging/metric:Metric"
ALERT_POLICY = "gcp:monitoring/alertPolicy:AlertPolicy"
