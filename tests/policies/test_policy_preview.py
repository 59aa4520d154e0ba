"""Preview-time unknown values, handled as under `pulumi preview`.

Reading an unknown value makes the SDK report an advisory "can't run policy
... during preview" note instead of a verdict. The rules avoid that where the
answer does not depend on the value (an unknown account is one the stack
creates; jobs are paired with services through dependencies), and stack rules
still report what they could check before admitting what they could not.
"""

from __future__ import annotations

from policy_stack import INVOKER_SA, edit, find, resource
from pulumi_policy import EnforcementLevel
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from scheduler_dedup.offline.stack_resources import StackResource, as_first_preview

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY
JOBS = ("nightly-report", "hourly-sync")


def _preview(stack: list[StackResource]) -> list[StackResource]:
    """Unknown URLs, invoker email, member strings and role name, as in a first preview."""
    handler = find(stack, "demo-handler")
    handler.outputs["url"] = UNKNOWN_STRING_VALUE
    handler.outputs["serviceConfig"]["uri"] = UNKNOWN_STRING_VALUE
    for props in (handler.inputs, handler.outputs):
        props["serviceConfig"]["serviceAccountEmail"] = UNKNOWN_STRING_VALUE
    for name in JOBS:
        for props in (find(stack, name).inputs, find(stack, name).outputs):
            props["httpTarget"]["uri"] = UNKNOWN_STRING_VALUE
            props["httpTarget"]["oidcToken"]["audience"] = UNKNOWN_STRING_VALUE
            props["httpTarget"]["oidcToken"]["serviceAccountEmail"] = UNKNOWN_STRING_VALUE
    for name in ("demo-runtime-ledger-access", "demo-invoker-run"):
        edit(stack, name, lambda p: p.__setitem__("member", UNKNOWN_STRING_VALUE))
    edit(stack, "demo-runtime-ledger-access", lambda p: p.__setitem__("role", UNKNOWN_STRING_VALUE))
    find(stack, "demo-ledger-role").outputs["name"] = UNKNOWN_STRING_VALUE
    return stack


def test_first_preview_of_the_compliant_stack_only_has_advisory_notes(stack, check) -> None:
    diagnostics = check(_preview(stack))
    assert {d.level for d in diagnostics} == {ADVISORY}
    assert {d.policy for d in diagnostics} == {
        "scheduler-oidc-audience",  # resource rule: uri and audience both unknown
        "scheduler-accepted-by-handler",  # the invoker email is unknown
        "run-runtime-account-not-shared",  # runtime and invoker emails are unknown
    }
    audience = [d for d in diagnostics if d.policy == "scheduler-oidc-audience"]
    assert sorted(d.urn for d in audience) == sorted(find(stack, n).urn for n in JOBS)
    for d in diagnostics:
        assert f"can't run policy '{d.policy}'" in d.message
        assert "can't be known during preview" in d.message


def test_jobs_are_paired_with_their_service_through_dependencies(stack, check) -> None:
    _preview(stack)
    edit(stack, "demo-handler", lambda p: p["serviceConfig"].__setitem__("timeoutSeconds", 600.0))
    timeout = [d for d in check(stack) if d.policy == "run-timeout-covers-attempt-deadline"]
    assert [d.level for d in timeout] == [MANDATORY]
    assert "scheduler-target-in-stack" not in {d.policy for d in check(stack)}


def test_stack_rule_reports_what_it_could_check_and_notes_the_rest(stack, check) -> None:
    _preview(stack)
    edit(
        stack,
        "demo-handler",
        lambda p: p["serviceConfig"]["environmentVariables"].update(
            DEDUP_ALLOWED_REGIONS="us-central1"
        ),
    )
    ours = [d for d in check(stack) if d.policy == "scheduler-accepted-by-handler"]
    mandatory = [d for d in ours if d.level == MANDATORY]
    assert len(mandatory) == 2  # both jobs send a region the handler rejects
    assert all("DEDUP_ALLOWED_REGIONS" in d.message for d in mandatory)
    assert [d.level for d in ours if d not in mandatory] == [ADVISORY]


def test_project_grants_follow_dependencies_to_a_too_wide_custom_role(stack, check) -> None:
    _preview(stack)
    edit(stack, "demo-ledger-role", lambda p: p["permissions"].append("datastore.entities.list"))
    grants = [d for d in check(stack) if d.policy == "iam-project-grants-least-privilege"]
    assert [(d.level, d.urn) for d in grants] == [
        (MANDATORY, find(stack, "demo-runtime-ledger-access").urn)
    ]


def test_public_members_stay_visible_in_preview(stack, check) -> None:
    _preview(stack)
    edit(stack, "demo-invoker-run", lambda p: p.__setitem__("member", "allUsers"))
    assert [d.level for d in check(stack) if d.policy == "run-no-public-invoker"] == [MANDATORY]


def test_as_first_preview_makes_computed_and_derived_values_unknown() -> None:
    email = "demo-invoker@demo-proj.iam.gserviceaccount.com"
    account = resource(
        "gcp:serviceaccount/account:Account",
        "sa",
        {"accountId": "demo-invoker", "project": "demo-proj"},
        {"email": email, "member": f"serviceAccount:{email}"},
    )
    grant = resource(
        "gcp:projects/iAMMember:IAMMember",
        "grant",
        {
            "project": "demo-proj",
            "role": "roles/logging.logWriter",
            "member": f"serviceAccount:{email}",
        },
        deps={"member": [account.urn]},
    )
    preview_account, preview_grant = as_first_preview([account, grant])
    assert preview_account.inputs == account.inputs
    assert preview_account.outputs["email"] == UNKNOWN_STRING_VALUE
    assert preview_account.outputs["accountId"] == "demo-invoker"
    assert preview_grant.inputs["member"] == UNKNOWN_STRING_VALUE
    assert preview_grant.inputs["role"] == "roles/logging.logWriter"
    assert preview_grant.outputs["member"] == UNKNOWN_STRING_VALUE
    assert email == INVOKER_SA
