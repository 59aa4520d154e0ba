"""Who runs an HTTP endpoint, for every serverless type that serves one.

`handler_resource` knows the three shapes the dedup handler can take; a
foreign program may also deploy 1st gen Cloud Functions. The runtime identity
rules need, for each of them, the field that sets the account and the Google
default that applies when it is left unset, so a message can name that account.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dedup_policies import handler_resource, types
from dedup_policies.props import as_text, get_path

# Where each type sets its runtime account, as the program spells it.
ACCOUNT_FIELD = {
    types.FUNCTION_V1: "service_account_email",
    types.FUNCTION_V2: "service_config.service_account_email",
    types.RUN_SERVICE_V2: "template.service_account",
    types.RUN_SERVICE_V1: "template.spec.service_account_name",
}

_COMPUTE_DEFAULT = (
    "the Compute Engine default service account "
    "(PROJECT_NUMBER-compute@developer.gserviceaccount.com)"
)
# The account a type runs as when the field is unset. Function identity (1st gen):
# "Cloud Run functions uses the App Engine default service account,
# PROJECT_ID@appspot.gserviceaccount.com"; Function identity (2nd gen) and Cloud Run
# service identity: "the default compute service account,
# PROJECT_NUMBER-compute@developer.gserviceaccount.com".
DEFAULT_ACCOUNT = {
    types.FUNCTION_V1: (
        "the App Engine default service account (PROJECT_ID@appspot.gserviceaccount.com)"
    ),
    types.FUNCTION_V2: _COMPUTE_DEFAULT,
    types.RUN_SERVICE_V2: _COMPUTE_DEFAULT,
    types.RUN_SERVICE_V1: _COMPUTE_DEFAULT,
}


def service_account(resource_type: str, props: Mapping[str, Any]) -> str | None:
    """The runtime account's email, or None when the Google default applies.

    Reading an unknown value raises `UnknownValueError`, as the SDK intends.
    """
    if resource_type == types.FUNCTION_V1:
        return as_text(get_path(props, "serviceAccountEmail"))
    return handler_resource.service_account(resource_type, props)


def invoker_role(iam_type: str) -> str:
    """The role that lets a caller invoke the endpoint an IAM resource guards."""
    # Cloud Functions IAM roles: Cloud Functions Invoker invokes "1st gen HTTP functions
    # with restricted access. 2nd gen functions need the Cloud Run Invoker role instead."
    if iam_type in types.FUNCTION_V1_IAM_TYPES:
        return "roles/cloudfunctions.invoker"
    return "roles/run.invoker"
