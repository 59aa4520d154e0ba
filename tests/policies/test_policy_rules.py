"""Each rule: silent on the compliant stack, firing on a minimal violating variant.

A variant changes one thing; the test asserts exactly which policies fire,
at which level, against which resource, and that the message says how to fix it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from policy_stack import (
    FN_URL,
    PROJECT,
    REGION,
    RUN_SERVICE_URL,
    RUNTIME_MEMBER,
    RUNTIME_SA,
    compliant_stack,
    edit,
    find,
    project_grant,
    resource,
    with_function_uri,
)
from pulumi_policy import EnforcementLevel

from dedup_policies.ingress_rules import ingress
from scheduler_dedup.offline.stack_resources import StackResource

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY


def test_compliant_stack_is_silent(stack: list[StackResource], check) -> None:
    assert check(stack) == []


@dataclass(frozen=True)
class Variant:
    id: str
    change: Callable[[list[StackResource]], None]
    fires: dict[str, EnforcementLevel]  # every policy expected to fire, and its level
    resource: str  # name of the resource the first expected policy reports
    says: str  # fragment of that policy's message (the fix)


def on(name: str, change: Callable[[dict], None]) -> Callable[[list[StackResource]], None]:
    return lambda resources: edit(resources, name, change)


def handler(change: Callable[[dict], None]) -> Callable[[list[StackResource]], None]:
    return lambda resources: edit(resources, "demo-handler", change)


def env(name: str, value: str) -> Callable[[list[StackResource]], None]:
    return handler(lambda p: p["serviceConfig"]["environmentVariables"].__setitem__(name, value))


def add(*new: StackResource) -> Callable[[list[StackResource]], None]:
    return lambda resources: resources.extend(new)


def remove(name: str) -> Callable[[list[StackResource]], None]:
    return lambda resources: resources.remove(find(resources, name))


def target(change: Callable[[dict], None]) -> Callable[[dict], None]:
    return lambda props: change(props["httpTarget"])


COMPUTE_SA = "123456789012-compute@developer.gserviceaccount.com"


def run_service(name: str, **extra: object) -> StackResource:
    return resource(
        "gcp:cloudrunv2/service:Service",
        name,
        {
            "location": REGION,
            "template": {
                "serviceAccount": f"other@{PROJECT}.iam.gserviceaccount.com",
                "containers": [{"image": "gcr.io/x/y"}],
            },
            **extra,
        },
        {"uri": RUN_SERVICE_URL},
    )


def in_second_region(resources: list[StackResource]) -> None:
    """The handler and `nightly-report` again in europe-west4, keyed by their own region."""
    region, url = "europe-west4", "https://demo-handler-123456789012.europe-west4.run.app"
    handler = copy.deepcopy(find(resources, "demo-handler"))
    handler.name = "demo-handler-west4"
    handler.urn = handler.urn.replace("::demo-handler", "::demo-handler-west4")
    for props in (handler.inputs, handler.outputs):
        props["location"] = region
        props["serviceConfig"]["environmentVariables"]["DEDUP_ALLOWED_REGIONS"] = region
    handler.outputs["serviceConfig"]["uri"] = url
    handler.outputs["url"] = url
    job = copy.deepcopy(find(resources, "nightly-report"))
    job.name = "nightly-report-west4"
    job.urn = job.urn.replace("::nightly-report", "::nightly-report-west4")
    job.dependencies = [handler.urn]
    job.property_dependencies = {"httpTarget": [handler.urn]}
    for props in (job.inputs, job.outputs):
        props["region"] = region
        target = props["httpTarget"]
        target["uri"] = target["oidcToken"]["audience"] = url
        target["headers"]["X-Dedup-Region"] = region
    resources.extend([handler, job])


VARIANTS = [
    Variant(
        "groc-schedule",
        on("nightly-report", lambda p: p.__setitem__("schedule", "every 24 hours")),
        {"scheduler-unix-cron-schedule": MANDATORY},
        "nightly-report",
        "unix-cron",
    ),
    Variant(
        "local-time-in-daylight-saving-gap",
        on("nightly-report", lambda p: p.__setitem__("timeZone", "Europe/Berlin")),
        {"scheduler-daylight-saving": ADVISORY},
        "nightly-report",
        "Schedule it in UTC, or at a local time outside 02:00-03:00",
    ),
    Variant(
        "cron-out-of-range",
        on("hourly-sync", lambda p: p.__setitem__("schedule", "61 * * * *")),
        {"scheduler-unix-cron-schedule": MANDATORY},
        "hourly-sync",
        "outside 0-59",
    ),
    Variant(
        "cron-day-step-ambiguous",
        on("hourly-sync", lambda p: p.__setitem__("schedule", "0 0 */2 * 1")),
        {"scheduler-unix-cron-schedule": MANDATORY},
        "hourly-sync",
        "write the step as a range ('1-31/2')",
    ),
    Variant(
        "cron-weekday-step-ambiguous",
        on("hourly-sync", lambda p: p.__setitem__("schedule", "0 0 15 * */3")),
        {"scheduler-unix-cron-schedule": MANDATORY},
        "hourly-sync",
        "write the step as a range ('0-6/3')",
    ),
    Variant(
        "cron-never-fires",
        on("nightly-report", lambda p: p.__setitem__("schedule", "0 9 31 6 *")),
        {"scheduler-unix-cron-schedule": MANDATORY},
        "nightly-report",
        "can never fire",
    ),
    Variant(
        "deadline-unset",
        on("hourly-sync", lambda p: p.pop("attemptDeadline")),
        {"scheduler-attempt-deadline": MANDATORY},
        "hourly-sync",
        "Set `attempt_deadline` explicitly",
    ),
    Variant(
        "deadline-too-short",
        on("hourly-sync", lambda p: p.__setitem__("attemptDeadline", "10s")),
        {"scheduler-attempt-deadline": MANDATORY},
        "hourly-sync",
        "between 15s and 1800s",
    ),
    Variant(
        "deadline-too-long",
        on("hourly-sync", lambda p: p.__setitem__("attemptDeadline", "1801s")),
        {"scheduler-attempt-deadline": MANDATORY, "run-timeout-covers-attempt-deadline": MANDATORY},
        "hourly-sync",
        "between 15s and 1800s",
    ),
    Variant(
        "oauth-token",
        on(
            "hourly-sync",
            target(
                lambda t: t.update(oauthToken={"serviceAccountEmail": "a@b"}) or t.pop("oidcToken")
            ),
        ),
        {"scheduler-oidc-token": MANDATORY},
        "hourly-sync",
        "Replace `http_target.oauth_token` with `http_target.oidc_token`",
    ),
    Variant(
        "no-token",
        on("hourly-sync", target(lambda t: t.pop("oidcToken"))),
        {"scheduler-oidc-token": MANDATORY},
        "hourly-sync",
        "Add `http_target.oidc_token`",
    ),
    Variant(
        "token-from-default-compute",
        on(
            "hourly-sync",
            target(lambda t: t["oidcToken"].__setitem__("serviceAccountEmail", COMPUTE_SA)),
        ),
        {"scheduler-oidc-token": MANDATORY, "scheduler-accepted-by-handler": MANDATORY},
        "hourly-sync",
        "Compute Engine default service account",
    ),
    Variant(
        "audience-unset",
        on("hourly-sync", target(lambda t: t["oidcToken"].pop("audience"))),
        {"scheduler-oidc-audience": MANDATORY},
        "hourly-sync",
        "Set `http_target.oidc_token.audience`",
    ),
    Variant(
        "audience-other-service",
        on(
            "hourly-sync",
            target(lambda t: t["oidcToken"].__setitem__("audience", "https://other.run.app")),
        ),
        {"scheduler-oidc-audience": MANDATORY},
        "hourly-sync",
        "set the audience to that service's URL",
    ),
    Variant(
        "region-header-missing",
        on("nightly-report", target(lambda t: t["headers"].pop("X-Dedup-Region"))),
        {"scheduler-dedup-headers": MANDATORY},
        "nightly-report",
        "Add the header 'X-Dedup-Region'",
    ),
    Variant(
        "project-header-empty",
        on("nightly-report", target(lambda t: t["headers"].__setitem__("X-Dedup-Project", " "))),
        {"scheduler-dedup-headers": MANDATORY},
        "nightly-report",
        "Add the header 'X-Dedup-Project'",
    ),
    Variant(
        "handler-reads-a-header-the-jobs-do-not-send",
        env("DEDUP_PROJECT_HEADER", "X-Proj"),
        {"scheduler-dedup-headers": MANDATORY},
        "hourly-sync",
        "or set DEDUP_PROJECT_HEADER of gcp:cloudfunctionsv2/function:Function 'demo-handler'",
    ),
    Variant(
        "handler-runtime-too-old",
        handler(lambda p: p.__setitem__("buildConfig", {"runtime": "python310"})),
        {"handler-python-runtime": MANDATORY},
        "demo-handler",
        "use one of python311, python312, python313",
    ),
    Variant(
        "project-header-is-content-type",
        env("DEDUP_PROJECT_HEADER", "content-type"),
        {"scheduler-dedup-headers": MANDATORY},
        "hourly-sync",
        "a header the job sets for its body",
    ),
    Variant(
        "retry-count-too-high",
        on("hourly-sync", lambda p: p["retryConfig"].__setitem__("retryCount", 6.0)),
        {"scheduler-retry-limits": MANDATORY},
        "hourly-sync",
        "from 0 to 5",
    ),
    Variant(
        "max-doublings-zero",
        on("hourly-sync", lambda p: p["retryConfig"].__setitem__("maxDoublings", 0.0)),
        {"scheduler-retry-limits": MANDATORY},
        "hourly-sync",
        "the provider drops",
    ),
    Variant(
        "backoff-reversed",
        on("hourly-sync", lambda p: p["retryConfig"].__setitem__("minBackoffDuration", "301s")),
        {"scheduler-retry-limits": MANDATORY},
        "hourly-sync",
        "longer than `max_backoff_duration`",
    ),
    Variant(
        "public-invoker-member",
        on("demo-invoker-run", lambda p: p.__setitem__("member", "allUsers")),
        {"run-no-public-invoker": MANDATORY},
        "demo-invoker-run",
        "allUsers is granted roles/run.invoker",
    ),
    Variant(
        "public-function-binding",
        add(
            resource(
                "gcp:cloudfunctionsv2/functionIamBinding:FunctionIamBinding",
                "public-binding",
                {
                    "cloudFunction": "demo-handler",
                    "role": "roles/cloudfunctions.invoker",
                    "members": ["allAuthenticatedUsers"],
                },
            )
        ),
        {"run-no-public-invoker": MANDATORY},
        "public-binding",
        "allAuthenticatedUsers is granted",
    ),
    Variant(
        "public-v1-policy",
        add(
            resource(
                "gcp:cloudrun/iamPolicy:IamPolicy",
                "public-policy",
                {
                    "service": "demo-handler",
                    "policyData": '{"bindings": [{"role": "roles/run.invoker", '
                    '"members": ["allUsers"]}]}',
                },
            )
        ),
        {"run-no-public-invoker": MANDATORY},
        "public-policy",
        "allUsers",
    ),
    Variant(
        "invoker-iam-disabled",
        add(run_service("open-service", invokerIamDisabled=True)),
        {"run-invoker-iam-enabled": MANDATORY},
        "open-service",
        "remove `invoker_iam_disabled`",
    ),
    Variant(
        "runtime-sa-unset",
        handler(lambda p: p["serviceConfig"].pop("serviceAccountEmail")),
        {"run-dedicated-service-account": MANDATORY},
        "demo-handler",
        "`service_config.service_account_email` is not set, so it runs as the Compute Engine",
    ),
    Variant(
        "runtime-sa-default-compute",
        handler(lambda p: p["serviceConfig"].__setitem__("serviceAccountEmail", COMPUTE_SA)),
        {"run-dedicated-service-account": MANDATORY},
        "demo-handler",
        "Compute Engine default service account",
    ),
    Variant(
        "timeout-below-deadline",
        handler(lambda p: p["serviceConfig"].__setitem__("timeoutSeconds", 600.0)),
        {"run-timeout-covers-attempt-deadline": MANDATORY},
        "demo-handler",
        "raise the request timeout to at least 900s",
    ),
    Variant(
        "lease-below-timeout",
        env("DEDUP_LEASE_SECONDS", "600"),
        {"lease-covers-request-timeout": MANDATORY},
        "demo-handler",
        "set DEDUP_LEASE_SECONDS to at least 900",
    ),
    Variant(
        "lease-not-whole-seconds",
        env("DEDUP_LEASE_SECONDS", "16m"),
        {"lease-covers-request-timeout": MANDATORY},
        "demo-handler",
        "not a whole number of seconds",
    ),
    Variant(
        "heartbeat-too-short",
        env("DEDUP_HEARTBEAT_SECONDS", "20"),
        {"lease-covers-request-timeout": MANDATORY},
        "demo-handler",
        "DEDUP_HEARTBEAT_SECONDS to something shorter than 48 s",
    ),
    Variant(
        "heartbeat-beyond-lease",
        env("DEDUP_HEARTBEAT_SECONDS", "4000"),
        {"lease-covers-request-timeout": MANDATORY},
        "demo-handler",
        "longer than DEDUP_LEASE_SECONDS",
    ),
    Variant(
        "retention-below-retry-window",
        env("DEDUP_RETENTION_SECONDS", "3000"),
        {"retention-covers-retry-window": MANDATORY},
        "demo-handler",
        "set DEDUP_RETENTION_SECONDS to at least 4501",
    ),
    Variant(
        "ttl-field-missing",
        remove("demo-ledger-ttl"),
        {"ledger-ttl-policy": MANDATORY},
        "demo-handler",
        "field='expire_at'",
    ),
    Variant(
        "ttl-on-other-collection",
        on("demo-ledger-ttl", lambda p: p.__setitem__("collection", "other_runs")),
        {"ledger-ttl-policy": MANDATORY},
        "demo-handler",
        "collection='scheduler_runs'",
    ),
    Variant(
        "two-regions-keyed-by-their-own",
        in_second_region,
        {"ledger-one-key-region": MANDATORY, "run-runtime-account-not-shared": MANDATORY},
        "demo-handler-west4",
        "Give both the same DEDUP_KEY_REGION",
    ),
    Variant(
        "regional-ledger-of-two-regions",
        lambda resources: (
            env("DEDUP_REGIONS", "europe-west1,europe-west4")(resources),
            on("demo-ledger-db", lambda p: p.__setitem__("locationId", "europe-west1"))(resources),
        ),
        {"ledger-multi-region": MANDATORY},
        "demo-ledger-db",
        "Create it in a multi-region location (nam5, nam7, eur3)",
    ),
    Variant(
        "ttl-field-indexed",
        on("demo-ledger-ttl", lambda p: p.pop("indexConfig")),
        {"ledger-ttl-field-not-indexed": ADVISORY},
        "demo-ledger-ttl",
        "set `index_config={}`",
    ),
    Variant(
        "job-targets-foreign-url",
        on(
            "hourly-sync",
            target(
                lambda t: t.update(
                    uri="https://hooks.example.com/run",
                    oidcToken={**t["oidcToken"], "audience": "https://hooks.example.com"},
                )
            ),
        ),
        {"scheduler-target-in-stack": MANDATORY},
        "hourly-sync",
        "build `http_target.uri` from the handler's",
    ),
    Variant(
        "job-without-http-target",
        on(
            "hourly-sync",
            lambda p: (
                p.pop("httpTarget")
                and p.pop("attemptDeadline")
                and p.update(pubsubTarget={"topic": "t"})
            ),
        ),
        {"scheduler-target-in-stack": MANDATORY},
        "hourly-sync",
        "publishes to Pub/Sub, so no ledger of this stack deduplicates its runs",
    ),
    Variant(
        "app-engine-job",
        on(
            "hourly-sync",
            lambda p: p.pop("httpTarget") and p.update(appEngineHttpTarget={"relativeUri": "/"}),
        ),
        {"scheduler-target-in-stack": MANDATORY},
        "hourly-sync",
        "has no `http_target`",
    ),
    Variant(
        "job-calls-a-google-api-directly",
        on(
            "hourly-sync",
            target(
                lambda t: (
                    t.update(
                        uri="https://workflowexecutions.googleapis.com/v1/projects/p/locations/"
                        "us-central1/workflows/w/executions",
                        oauthToken={"serviceAccountEmail": t["oidcToken"]["serviceAccountEmail"]},
                    )
                    or t.pop("oidcToken")
                )
            ),
        ),
        {"scheduler-target-in-stack": MANDATORY},
        "hourly-sync",
        "which starts a new run on every retry",
    ),
    Variant(
        "pubsub-job-with-attempt-deadline",
        on("hourly-sync", lambda p: p.pop("httpTarget") and p.update(pubsubTarget={"topic": "t"})),
        {"scheduler-attempt-deadline": MANDATORY, "scheduler-target-in-stack": MANDATORY},
        "hourly-sync",
        "Remove `attempt_deadline`: Cloud Scheduler ignores it for Pub/Sub targets",
    ),
    Variant(
        "region-not-allowed-by-handler",
        env("DEDUP_ALLOWED_REGIONS", "us-central1"),
        {"scheduler-accepted-by-handler": MANDATORY},
        "nightly-report",
        "add the value to DEDUP_ALLOWED_REGIONS",
    ),
    Variant(
        "invoker-is-the-runtime-account",
        on(
            "hourly-sync",
            target(lambda t: t["oidcToken"].__setitem__("serviceAccountEmail", RUNTIME_SA)),
        ),
        {"run-runtime-account-not-shared": MANDATORY, "scheduler-accepted-by-handler": MANDATORY},
        "hourly-sync",
        "use a separate invoker account",
    ),
    Variant(
        "runtime-account-shared-with-another-service",
        add(
            resource(
                "gcp:cloudrunv2/service:Service",
                "other-service",
                {"location": REGION, "template": {"serviceAccount": RUNTIME_SA}},
                {"uri": RUN_SERVICE_URL},
            )
        ),
        {"run-runtime-account-not-shared": MANDATORY},
        "demo-handler",
        "give each service its own runtime account",
    ),
    Variant(
        "primitive-role-for-a-user",
        add(project_grant("viewer-grant", "roles/viewer", "user:ops@example.com")),
        {"iam-no-primitive-roles": MANDATORY},
        "viewer-grant",
        "roles/viewer is a primitive role",
    ),
    Variant(
        "primitive-role-for-runtime",
        add(project_grant("editor-grant", "roles/editor")),
        # One problem, one violation: the least-privilege rule leaves primitive roles to this one.
        {"iam-no-primitive-roles": MANDATORY},
        "editor-grant",
        "roles/editor is a primitive role",
    ),
    Variant(
        # The dead-letter topic's publisher, granted on the whole project.
        "project-wide-pubsub-publisher",
        add(project_grant("publisher-grant", "roles/pubsub.publisher")),
        {"iam-pubsub-publisher-on-topic": MANDATORY},
        "publisher-grant",
        "grant roles/pubsub.publisher on the one topic (pubsub.TopicIAMMember)",
    ),
    Variant(
        "project-wide-pubsub-editor-to-anyone",
        add(project_grant("pubsub-editor-grant", "roles/pubsub.editor", "user:ops@example.com")),
        {"iam-pubsub-publisher-on-topic": MANDATORY},
        "pubsub-editor-grant",
        "roles/pubsub.editor on the project lets its member publish to every topic",
    ),
    Variant(
        "predefined-datastore-role",
        add(project_grant("datastore-grant", "roles/datastore.user")),
        {"iam-project-grants-least-privilege": MANDATORY},
        "datastore-grant",
        "roles/datastore.user is broader than the design needs",
    ),
    Variant(
        # target.proto reserves X-Google-* and X-AppEngine-* in any case; the provider's
        # own check is case-sensitive and lets this one through.
        "reserved-header-lower-case",
        on(
            "hourly-sync",
            target(lambda t: t["headers"].__setitem__("x-google-trace-me", "1")),
        ),
        {"scheduler-reserved-headers": MANDATORY},
        "hourly-sync",
        "'x-google-trace-me' begins with 'x-google-'",
    ),
    Variant(
        "reserved-header-appengine",
        on(
            "hourly-sync",
            target(lambda t: t["headers"].__setitem__("X-APPENGINE-REGION", "x")),
        ),
        {"scheduler-reserved-headers": MANDATORY},
        "hourly-sync",
        "'X-APPENGINE-REGION' begins with 'x-appengine-'",
    ),
    Variant(
        # The audit's listing through the predefined role: it also reads every job's
        # target (jobs.fullView), so only the custom role of the listing is accepted.
        "predefined-scheduler-viewer-role",
        on("demo-scheduler-read", lambda p: p.__setitem__("role", "roles/cloudscheduler.viewer")),
        {"iam-project-grants-least-privilege": MANDATORY},
        "demo-scheduler-read",
        "grant a custom role limited to cloudscheduler.jobs.list",
    ),
    Variant(
        "scheduler-role-reads-job-targets",
        on(
            "demo-scheduler-read-role",
            lambda p: p["permissions"].append("cloudscheduler.jobs.fullView"),
        ),
        {"iam-project-grants-least-privilege": MANDATORY},
        "demo-scheduler-read",
        "cloudscheduler.jobs.fullView",
    ),
    Variant(
        # The audit's log read is a custom role holding logging.logEntries.list alone.
        "predefined-logging-viewer-role",
        add(project_grant("log-viewer-grant", "roles/logging.viewer")),
        {"iam-project-grants-least-privilege": MANDATORY},
        "log-viewer-grant",
        "roles/logging.viewer is broader than the design needs",
    ),
    Variant(
        "custom-role-too-wide",
        on(
            "demo-ledger-role",
            lambda p: p["permissions"].append("datastore.entities.list"),
        ),
        {"iam-project-grants-least-privilege": MANDATORY},
        "demo-runtime-ledger-access",
        "datastore.entities.list",
    ),
    Variant(
        "custom-role-can-delete",
        on(
            "demo-ledger-role",
            lambda p: p["permissions"].append("datastore.entities.delete"),
        ),
        {"iam-project-grants-least-privilege": MANDATORY},
        "demo-runtime-ledger-access",
        "datastore.entities.delete",
    ),
    Variant(
        "conditional-role-without-condition",
        on("demo-build-staged-source-reader", lambda p: p.pop("condition")),
        {"iam-project-grants-least-privilege": MANDATORY},
        "demo-build-staged-source-reader",
        "only allowed with an IAM condition",
    ),
    Variant(
        "handler-ingress-all",
        handler(lambda p: p["serviceConfig"].__setitem__("ingressSettings", "ALLOW_ALL")),
        {"run-handler-ingress-internal": ADVISORY},
        "demo-handler",
        "set service_config.ingress_settings to internal-only",
    ),
    Variant(
        # Unset, a function accepts all traffic (ServiceConfig.ingressSettings default).
        "handler-ingress-unset",
        handler(lambda p: p["serviceConfig"].pop("ingressSettings")),
        {"run-handler-ingress-internal": ADVISORY},
        "demo-handler",
        "accepts ALLOW_ALL ingress",
    ),
    Variant(
        "no-alert-on-missed-runs",
        remove("demo-alert-missed"),
        {"dedup-run-alerting": ADVISORY},
        "demo-handler",
        "scheduled runs the audit found missed",
    ),
    Variant(
        "failed-run-alert-disabled",
        on("demo-alert-failed", lambda p: p.__setitem__("enabled", False)),
        {"dedup-run-alerting": ADVISORY},
        "demo-handler",
        "outcome 'failed_terminal' or 'run_failed'",
    ),
    Variant(
        "failed-run-alert-on-another-metric",
        on(
            "demo-alert-failed",
            lambda p: p["conditions"][0]["conditionThreshold"].__setitem__(
                "filter", 'metric.type="logging.googleapis.com/user/demo-runs-total"'
            ),
        ),
        {"dedup-run-alerting": ADVISORY},
        "demo-handler",
        "RunMonitoring creates both",
    ),
    Variant(
        "missed-run-alert-watches-only-stale-runs",
        on(
            "demo-alert-missed",
            lambda p: p["conditions"][0]["conditionThreshold"].__setitem__(
                "filter",
                'metric.type="logging.googleapis.com/user/demo-findings" AND '
                'metric.label.kind="run_stale"',
            ),
        ),
        {"dedup-run-alerting": ADVISORY},
        "demo-handler",
        "outcome 'run_missed'",
    ),
]


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.id for v in VARIANTS])
def test_variant_fires_expected_policies(
    variant: Variant, stack: list[StackResource], check
) -> None:
    variant.change(stack)
    diagnostics = check(stack)
    fired = {d.policy: d.level for d in diagnostics}
    assert fired == variant.fires
    first = next(iter(variant.fires))
    ours = [d for d in diagnostics if d.policy == first]
    assert any(d.urn == find(stack, variant.resource).urn for d in ours), ours
    assert any(variant.says in d.message for d in ours), [d.message for d in ours]


def test_stack_declared_header_names_pass(check) -> None:
    # `scheduler-dedup:projectHeader: X-Proj`: the handler reads X-Proj, the jobs send it.
    stack = with_function_uri(compliant_stack(project_header="X-Proj", region_header="X-Reg"))
    assert check(stack) == []


def test_handler_behind_a_load_balancer_is_reported_but_not_blocked(
    stack: list[StackResource], check
) -> None:
    edit(
        stack,
        "demo-handler",
        lambda p: p["serviceConfig"].__setitem__("ingressSettings", "ALLOW_INTERNAL_AND_GCLB"),
    )
    (diagnostic,) = check(stack)
    assert (diagnostic.policy, diagnostic.level) == ("run-handler-ingress-internal", ADVISORY)
    # A team that wants internal-only enforced makes the rule mandatory.
    (enforced,) = check(stack, '{"run-handler-ingress-internal": "mandatory"}')
    assert enforced.level == MANDATORY


def test_a_service_no_job_calls_is_not_judged_on_ingress(stack: list[StackResource], check) -> None:
    # A public web service elsewhere in the program is not a dedup handler.
    stack.append(run_service("public-site", ingress="INGRESS_TRAFFIC_ALL"))
    assert check(stack) == []


def test_ingress_is_read_from_each_handler_type() -> None:
    assert ingress(
        "gcp:cloudrunv2/service:Service", {"ingress": "INGRESS_TRAFFIC_INTERNAL_ONLY"}
    ) == ("INGRESS_TRAFFIC_INTERNAL_ONLY", True)
    assert ingress("gcp:cloudrunv2/service:Service", {}) == ("INGRESS_TRAFFIC_ALL", False)
    v1 = {"metadata": {"annotations": {"run.googleapis.com/ingress": "internal"}}}
    assert ingress("gcp:cloudrun/service:Service", v1) == ("internal", True)
    assert ingress("gcp:cloudrun/service:Service", {}) == ("all", False)


def test_workflow_target_grant_on_the_project_is_allowed_as_it_must_be(
    stack: list[StackResource], check
) -> None:
    # Workflows roles go no lower than the project and Workflows ignores resource-name
    # conditions, so the stack grants roles/workflows.invoker unconditioned.
    stack.append(project_grant("demo-workflow-invoker", "roles/workflows.invoker"))
    assert check(stack) == []
    # Refusing workflow targets: take the role out of allowedRoles.
    (diagnostic,) = check(
        stack,
        '{"iam-project-grants-least-privilege": {"allowedRoles": ["roles/logging.logWriter"]}}',
    )
    assert diagnostic.policy == "iam-project-grants-least-privilege"
    assert "roles/workflows.invoker is broader than the design needs" in diagnostic.message


def test_a_publisher_grant_on_the_dead_letter_topic_is_silent(
    stack: list[StackResource], check
) -> None:
    stack.append(
        resource(
            "gcp:pubsub/topicIAMMember:TopicIAMMember",
            "demo-dead-letters-publisher",
            {
                "topic": f"projects/{PROJECT}/topics/scheduler-dead-letters",
                "role": "roles/pubsub.publisher",
                "member": RUNTIME_MEMBER,
            },
        )
    )
    assert check(stack) == []


def test_every_policy_has_a_firing_variant(pack) -> None:
    covered = {name for variant in VARIANTS for name in variant.fires}
    assert covered == {policy.name for policy in pack.arguments["policies"]}


def test_message_starts_with_description_then_fix(stack: list[StackResource], check) -> None:
    edit(stack, "hourly-sync", lambda p: p.__setitem__("schedule", "every 5 minutes"))
    (diagnostic,) = check(stack)
    description, _, fix = diagnostic.message.partition("\n")
    assert description == "Cloud Scheduler jobs use a unix-cron schedule (not groc)."
    assert "Rewrite it in unix-cron" in fix


def test_a_log_match_alert_on_the_outcome_counts_as_alerting(stack, check) -> None:
    # Log-based alerting (conditionMatchedLog) watches the handler's lines without a metric.
    edit(
        stack,
        "demo-alert-failed",
        lambda p: p["conditions"][0].update(
            conditionThreshold=None,
            conditionMatchedLog={"filter": 'jsonPayload.outcome="failed_terminal"'},
        ),
    )
    assert check(stack) == []


def test_a_stack_without_a_dedup_handler_needs_no_alerting(check) -> None:
    grant = project_grant("demo-grant", "roles/datastore.user")
    assert "dedup-run-alerting" not in {d.policy for d in check([grant])}


def test_a_job_calling_an_internal_only_handler_not_at_its_run_app_url_is_reported(
    stack: list[StackResource], check
) -> None:
    # "Restrict network ingress for Cloud Run": Cloud Scheduler reaches an internal-only
    # service only at its default run.app URL. The function's cloudfunctions.net URL is
    # one of the handler's own URLs, so the job is paired with it, and told.
    edit(
        stack,
        "nightly-report",
        lambda p: p["httpTarget"].update(
            uri=FN_URL, oidcToken={**p["httpTarget"]["oidcToken"], "audience": FN_URL}
        ),
    )
    diagnostics = check(stack)

    (note,) = diagnostics
    assert (note.policy, note.level) == ("run-handler-ingress-internal", ADVISORY)
    assert note.urn == find(stack, "nightly-report").urn
    assert "default run.app URL" in note.message
    assert f"{FN_URL!r}" in note.message


def test_one_schedules_handler_in_two_regions_keyed_alike_passes(
    stack: list[StackResource], check
) -> None:
    # As the program deploys `regions`: one key region, both regions listed, one account.
    in_second_region(stack)
    for name in ("demo-handler", "demo-handler-west4"):
        edit(
            stack,
            name,
            lambda p: p["serviceConfig"]["environmentVariables"].update(
                DEDUP_KEY_REGION=REGION, DEDUP_REGIONS=f"{REGION},europe-west4"
            ),
        )
    assert check(stack) == []
