"""IAM rules: no primitive roles anywhere, and no project-wide grant to the
stack's own service accounts beyond what the ledger design needs.

The handler needs three Firestore permissions (`facts.LEDGER_PERMISSIONS`:
get, create and update of documents) and the invoker needs run.invoker on one
service; anything granted project-wide on top of that (a predefined role such
as roles/datastore.user included) widens what a leaked token can do, so the
project-wide allowance is an explicit list.
"""

from __future__ import annotations

from collections.abc import Iterable

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

from dedup_policies import types
from dedup_policies.accounts import member_email
from dedup_policies.config import schema, setting
from dedup_policies.facts import (
    LEDGER_PERMISSIONS,
    PAUSE_LOG_PERMISSIONS,
    SCHEDULER_READ_PERMISSIONS,
)
from dedup_policies.iam_grants import grants
from dedup_policies.props import as_list, as_text, get_path

PRIMITIVE_ROLES = frozenset({"roles/owner", "roles/editor", "roles/viewer"})

# Project-wide predefined roles that add no data access: observability only.
OBSERVABILITY_ROLES = (
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/cloudtrace.agent",
)

# Project-wide roles a proxy target needs as they are: roles/workflows.invoker lets
# the runtime account start EVERY workflow in the project it is granted on. Workflows
# roles go no lower than the project ("Workflows roles and permissions") and Workflows
# does not evaluate resource-name conditions ("Resource attributes for IAM
# Conditions" does not list it), so no narrower grant works. Remove it from
# `allowedRoles` to refuse workflow targets.
PROXY_TARGET_ROLES = ("roles/workflows.invoker",)

# The permissions a stack custom role may hold project-wide: exactly what the handler
# calls. The ledger's (granted with a database condition); the audit's Scheduler listing
# (SCHEDULER_READ_PERMISSIONS: cloudscheduler.jobs.list; Scheduler grants go no lower
# than the project, "Cloud Scheduler roles and permissions"); and the audit's read of
# Scheduler's Admin Activity log (PAUSE_LOG_PERMISSIONS: logging.logEntries.list). Every
# predefined Cloud Scheduler role is refused: even roles/cloudscheduler.viewer holds
# cloudscheduler.jobs.fullView, which reads every job's target headers and body in the
# project ("Access control with IAM"). A handler that needs more (delete, listing,
# transactions) can add them through this policy's `allowedPermissions` config.
DEFAULT_PERMISSIONS = (*LEDGER_PERMISSIONS, *SCHEDULER_READ_PERMISSIONS, *PAUSE_LOG_PERMISSIONS)

# Project-wide roles allowed only with an IAM condition narrowing them: the build
# account's access to the staging bucket Cloud Run functions copies sources into
# (Storage Object Admin, as "Configure the build service account" asks).
CONDITIONAL_ROLES = ("roles/storage.objectViewer", "roles/storage.objectAdmin")


# Predefined roles holding pubsub.topics.publish: granted on the project, each lets the
# member publish to every topic in it ("Pub/Sub roles and permissions"). The dead-letter
# topic's publisher is granted on that topic alone (pubsub.TopicIAMMember).
PUBSUB_PUBLISH_ROLES = frozenset(
    {"roles/pubsub.publisher", "roles/pubsub.editor", "roles/pubsub.admin"}
)


def _publisher_on_topic(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in types.PROJECT_IAM_TYPES:
        return
    for role in sorted({role for role, _ in grants(args.props)} & PUBSUB_PUBLISH_ROLES):
        report(
            f"{role} on the project lets its member publish to every topic in it; grant "
            "roles/pubsub.publisher on the one topic (pubsub.TopicIAMMember), as the stack "
            "does for its dead-letter topic (deadLetterTopic).",
            None,
        )


pubsub_publisher_on_topic = ResourceValidationPolicy(
    name="iam-pubsub-publisher-on-topic",
    description="Pub/Sub publishing is granted on a topic, never project-wide.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_publisher_on_topic,
)


def _no_primitive_roles(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not types.is_iam_grant(args.resource_type):
        return
    for role in sorted({role for role, _ in grants(args.props)} & PRIMITIVE_ROLES):
        report(
            f"{role} is a primitive role covering every service in the project; grant the "
            "narrowest predefined or custom role that the member actually needs.",
            None,
        )


no_primitive_roles = ResourceValidationPolicy(
    name="iam-no-primitive-roles",
    description="IAM grants never use the primitive roles owner, editor or viewer.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_no_primitive_roles,
)


class _StackAccounts:
    """The service accounts the stack creates, matched by email or account id."""

    def __init__(self, resources: Iterable[PolicyResource]) -> None:
        self.emails: set[str] = set()
        self.account_ids: set[str] = set()
        for resource in resources:
            if resource.resource_type != types.SERVICE_ACCOUNT:
                continue
            account_id = as_text(get_path(resource.props, "accountId"))
            if account_id:
                self.account_ids.add(account_id.lower())
            try:
                email = as_text(get_path(resource.props, "email"))
            except UnknownValueError:
                email = None  # new account during preview: its account id still identifies it
            if email:
                self.emails.add(email.lower())

    def owns(self, member: str) -> bool:
        email = member_email(member)
        if email is None:
            return False
        local, _, domain = email.partition("@")
        return email in self.emails or (
            local in self.account_ids and domain.endswith(".iam.gserviceaccount.com")
        )


def _custom_roles(resources: Iterable[PolicyResource]) -> dict[str, PolicyResource]:
    """Role reference -> custom role resource, for every custom role the stack defines.

    A grant names a custom role as `projects/P/roles/ID` (the role's `name`
    output), so both that output and the `…/roles/ID` suffix are keys.
    """
    roles: dict[str, PolicyResource] = {}
    for resource in resources:
        if resource.resource_type != types.CUSTOM_ROLE:
            continue
        role_id = as_text(get_path(resource.props, "roleId"))
        if role_id:
            roles[f"/roles/{role_id}"] = resource
        try:
            name = as_text(get_path(resource.props, "name"))
        except UnknownValueError:
            name = None
        if name:
            roles[name] = resource
    return roles


def _custom_role_for(role: str, custom: dict[str, PolicyResource]) -> PolicyResource | None:
    if role in custom:
        return custom[role]
    if "/roles/" in role:
        return custom.get("/roles/" + role.rsplit("/", 1)[-1])
    return None


def _dependency(resource: PolicyResource, prop: str, resource_type: str) -> PolicyResource | None:
    """The stack resource of `resource_type` that property `prop` was computed from."""
    for dep in resource.property_dependencies.get(prop, []):
        if dep.resource_type == resource_type:
            return dep
    return None


class _Grant:
    """One project-wide (role, member) with how the role is referenced.

    During a real preview a new custom role's name and a new account's member
    string are unknown; the property dependencies still say which stack
    resources they come from, so the rule can run instead of giving up.
    """

    def __init__(
        self,
        role: str | None,
        member: str | None,
        conditional: bool,
        role_resource: PolicyResource | None = None,
        member_resource: PolicyResource | None = None,
    ) -> None:
        self.role = role
        self.member = member
        self.conditional = conditional
        self.role_resource = role_resource
        self.member_resource = member_resource


def _read(resource: PolicyResource, prop: str) -> tuple[str | None, bool]:
    try:
        return as_text(get_path(resource.props, prop)), False
    except UnknownValueError:
        return None, True


def _project_grants_of(resource: PolicyResource) -> list[_Grant]:
    conditional = get_path(resource.props, "condition") is not None
    if resource.resource_type == types.PROJECT_IAM_POLICY:
        return [_Grant(role, member, False) for role, member in grants(resource.props)]
    role, role_unknown = _read(resource, "role")
    role_resource = _dependency(resource, "role", types.CUSTOM_ROLE) if role_unknown else None
    if role_unknown and role_resource is None:
        get_path(resource.props, "role")  # re-raise: the SDK reports "can't run during preview"
    members: list[str | None]
    member_resource = None
    if resource.resource_type == types.PROJECT_IAM_MEMBER:
        member, member_unknown = _read(resource, "member")
        members = [member]
        if member_unknown:
            member_resource = _dependency(resource, "member", types.SERVICE_ACCOUNT)
            if member_resource is None:
                get_path(resource.props, "member")
    else:
        members = [m for m in as_list(get_path(resource.props, "members")) if isinstance(m, str)]
    return [_Grant(role, m, conditional, role_resource, member_resource) for m in members]


def _role_problem(
    grant: _Grant,
    custom: dict[str, PolicyResource],
    allowed_roles: set[str],
    conditional_roles: set[str],
    allowed_perms: set[str],
) -> str | None:
    role = grant.role or ""
    if role in PRIMITIVE_ROLES:
        return None  # iam-no-primitive-roles reports it: one problem, one violation
    if role in PUBSUB_PUBLISH_ROLES:
        return None  # iam-pubsub-publisher-on-topic reports it
    if role in allowed_roles or (grant.conditional and role in conditional_roles):
        return None
    if role in conditional_roles:
        return f"{role} is only allowed with an IAM condition that narrows it"
    role_resource = grant.role_resource or _custom_role_for(role, custom)
    if role_resource is None:
        if "/roles/" in role and not role.startswith("roles/"):
            return f"custom role {role} is not defined in this stack; its permissions are unknown"
        return f"{role or 'the role'} is broader than the design needs project-wide"
    permissions = as_list(get_path(role_resource.props, "permissions"))
    extra = sorted(set(p for p in permissions if isinstance(p, str)) - allowed_perms)
    if extra:
        return (
            f"custom role {role_resource.name} includes permissions the design does not "
            f"need: {', '.join(extra)}"
        )
    return None


def _advice(grant: _Grant) -> str:
    """How to narrow this grant, fitting the role: Firestore advice only for data roles."""
    role = grant.role or ""
    allow = "or add the role to this policy's `allowedRoles` config if it is really needed."
    if role.startswith("roles/cloudscheduler."):
        return (
            f"{role} reads every Scheduler job's target (cloudscheduler.jobs.fullView); for the "
            f"audit, grant a custom role limited to {', '.join(SCHEDULER_READ_PERMISSIONS)}."
        )
    if (
        role.startswith(("roles/datastore.", "roles/firestore."))
        or grant.role_resource
        or ("/roles/" in role and not role.startswith("roles/"))
    ):
        return (
            f"For the ledger's handler, grant a custom role limited to "
            f"{', '.join(LEDGER_PERMISSIONS)} (the audit's: "
            f"{', '.join(SCHEDULER_READ_PERMISSIONS)}), {allow}"
        )
    if role in ("roles/run.invoker", "roles/cloudfunctions.invoker"):
        return (
            f"Grant {role} on the one service or function to be called (a service-level IAM "
            f"member), not on the project, {allow}"
        )
    return (
        f"Grant {role or 'the role'} on the resource that needs it (the instance, bucket, "
        f"secret or topic), not on the whole project, {allow}"
    )


def _project_grants(args: StackValidationArgs, report: ReportViolation) -> None:
    allowed_roles = set(setting(args, "allowedRoles", [*OBSERVABILITY_ROLES, *PROXY_TARGET_ROLES]))
    conditional_roles = set(setting(args, "allowedConditionalRoles", list(CONDITIONAL_ROLES)))
    allowed_perms = set(setting(args, "allowedPermissions", list(DEFAULT_PERMISSIONS)))
    accounts = _StackAccounts(args.resources)
    custom = _custom_roles(args.resources)
    for resource in args.resources:
        if resource.resource_type not in types.PROJECT_IAM_TYPES:
            continue
        for grant in _project_grants_of(resource):
            if grant.member_resource is not None:
                member = f"service account {grant.member_resource.name}"
            elif grant.member is not None and accounts.owns(grant.member):
                member = grant.member
            else:
                continue
            problem = _role_problem(grant, custom, allowed_roles, conditional_roles, allowed_perms)
            if problem:
                report(
                    f"Project-wide grant to {member}: {problem}. {_advice(grant)}",
                    resource.urn,
                )


project_grants_least_privilege = StackValidationPolicy(
    name="iam-project-grants-least-privilege",
    description="Project-wide IAM grants to the stack's service accounts stay within what "
    "the ledger design needs.",
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=schema(
        allowedRoles={
            "type": "array",
            "items": {"type": "string"},
            "default": [*OBSERVABILITY_ROLES, *PROXY_TARGET_ROLES],
        },
        allowedConditionalRoles={
            "type": "array",
            "items": {"type": "string"},
            "default": list(CONDITIONAL_ROLES),
        },
        allowedPermissions={
            "type": "array",
            "items": {"type": "string"},
            "default": list(DEFAULT_PERMISSIONS),
        },
    ),
    validate=_project_grants,
)

POLICIES = [no_primitive_roles, project_grants_least_privilege, pubsub_publisher_on_topic]
