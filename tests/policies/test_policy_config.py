"""Policy config (`--policy-pack-config` JSON), reconciled as the CLI does it.

Levels come from the policy, then "all", then the policy's own entry;
properties are schema defaults overlaid by config and validated against the
schema before the pack is configured.
"""

from __future__ import annotations

import pytest
from policy_stack import edit, project_grant
from pulumi_policy import EnforcementLevel

from scheduler_dedup.offline.errors import CheckError
from scheduler_dedup.offline.stack_resources import StackResource

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY


def groc(stack: list[StackResource]) -> list[StackResource]:
    edit(stack, "hourly-sync", lambda p: p.__setitem__("schedule", "every 1 hours"))
    return stack


def levels(diagnostics) -> dict[str, EnforcementLevel]:
    return {d.policy: d.level for d in diagnostics}


def test_policy_level_can_be_lowered(stack, check) -> None:
    config = '{"scheduler-unix-cron-schedule": "advisory"}'
    assert levels(check(groc(stack), config)) == {"scheduler-unix-cron-schedule": ADVISORY}


def test_policy_can_be_disabled(stack, check) -> None:
    assert check(groc(stack), '{"scheduler-unix-cron-schedule": "disabled"}') == []


def test_advisory_policy_can_be_made_mandatory(stack, check) -> None:
    edit(stack, "demo-ledger-ttl", lambda p: p.pop("indexConfig"))
    config = '{"ledger-ttl-field-not-indexed": {"enforcementLevel": "mandatory"}}'
    assert levels(check(stack, config)) == {"ledger-ttl-field-not-indexed": MANDATORY}


def test_all_sets_every_level_and_a_named_policy_overrides_it(stack, check) -> None:
    groc(stack)
    edit(stack, "hourly-sync", lambda p: p.__setitem__("attemptDeadline", "5s"))
    assert levels(check(stack, '{"all": "advisory"}')) == {
        "scheduler-unix-cron-schedule": ADVISORY,
        "scheduler-attempt-deadline": ADVISORY,
    }
    config = '{"all": "disabled", "scheduler-attempt-deadline": "mandatory"}'
    assert levels(check(stack, config)) == {"scheduler-attempt-deadline": MANDATORY}


def test_remediate_is_reported_as_mandatory(stack, check) -> None:
    # The pack has no remediations; the SDK then reports a remediate-level violation as mandatory.
    config = '{"scheduler-unix-cron-schedule": "remediate"}'
    assert levels(check(groc(stack), config)) == {"scheduler-unix-cron-schedule": MANDATORY}


def test_properties_override_defaults_and_keep_the_level(stack, check) -> None:
    config = '{"scheduler-attempt-deadline": {"maxSeconds": 600}}'
    diagnostics = check(stack, config)
    assert levels(diagnostics) == {"scheduler-attempt-deadline": MANDATORY}
    # nightly-report waits 900 s per attempt; hourly-sync's 120 s is within the new bound.
    assert [d.message.splitlines()[-1] for d in diagnostics] == [
        "`attempt_deadline` is 900s; set it between 15s and 600s."
    ]


def test_level_and_properties_together(stack, check) -> None:
    config = '{"scheduler-retry-limits": {"enforcementLevel": "advisory", "maxRetryCount": 2}}'
    diagnostics = check(stack, config)
    assert levels(diagnostics) == {"scheduler-retry-limits": ADVISORY}
    assert "from 0 to 2" in diagnostics[0].message


def test_allowed_roles_can_be_extended(stack, check) -> None:
    stack.append(project_grant("datastore-grant", "roles/datastore.user"))
    assert check(stack) != []
    config = (
        '{"iam-project-grants-least-privilege": {"allowedRoles": '
        '["roles/logging.logWriter", "roles/datastore.user"]}}'
    )
    assert check(stack, config) == []


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ('{"scheduler-retry-limits": {"maxRetryCount": 9}}', "maxRetryCount: must be <= 5"),
        ('{"scheduler-attempt-deadline": {"maxSeconds": "long"}}', "expected number"),
        ('{"scheduler-attempt-deadline": {"minSeconds": 5}}', "minSeconds: must be >= 15"),
        ('{"iam-project-grants-least-privilege": {"allowedRoles": [1]}}', "allowedRoles.0"),
        ('{"scheduler-oidc-token": "loud"}', "'loud' is not one of"),
        ('{"scheduler-oidc-token": 3}', "must be a string or an object"),
        ("[1, 2]", "JSON object keyed by policy name"),
        ("{not json", "not valid JSON"),
    ],
)
def test_invalid_config_is_a_usage_error(stack, check, config: str, error: str) -> None:
    with pytest.raises(CheckError, match=error):
        check(stack, config)
