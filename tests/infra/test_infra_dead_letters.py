"""`deadLetterTopic`: the topic (created, or an existing one's id), the runtime account's
publisher grant on that topic only, and the handler's DEDUP_DEAD_LETTER_TOPIC."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dedup_schedule.config.model import ConfigError
from dedup_schedule.config.parser import parse_config
from scheduler_dedup.offline.mockrun import CapturedResource
from tests.infra import test_infra_audit
from tests.infra.test_infra_audit import environment
from tests.infra.test_infra_template import run_plan

# The program run on the multi-job stack with extra keys (`test_infra_audit.run`).
run = test_infra_audit.run

NS = "scheduler-dedup:"
TOPIC = "gcp:pubsub/topic:Topic"
TOPIC_GRANT = "gcp:pubsub/topicIAMMember:TopicIAMMember"
PROJECT_GRANT = "gcp:projects/iAMMember:IAMMember"
METRIC = "gcp:logging/metric:Metric"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
RUNTIME = "serviceAccount:dedup-runtime@dedup-test-project.iam.gserviceaccount.com"


def of(resources: list[CapturedResource], typ: str) -> list[CapturedResource]:
    return [r for r in resources if r.type == typ]


def test_a_topic_id_makes_the_stack_create_it_and_grant_publishing_on_it_alone(run) -> None:
    resources = run(deadLetterTopic="scheduler-dead-letters")
    (topic,) = of(resources, TOPIC)
    assert (topic.inputs["name"], topic.inputs["project"]) == (
        "scheduler-dead-letters",
        "dedup-test-project",
    )
    (grant,) = of(resources, TOPIC_GRANT)
    full = "projects/dedup-test-project/topics/scheduler-dead-letters"
    assert grant.inputs == {"topic": full, "role": "roles/pubsub.publisher", "member": RUNTIME}
    assert topic.urn in grant.dependencies
    roles = {r.inputs["role"] for r in of(resources, PROJECT_GRANT)}
    assert not any(role.startswith("roles/pubsub.") for role in roles)
    apis = {r.inputs["service"] for r in of(resources, "gcp:projects/service:Service")}
    assert "pubsub.googleapis.com" in apis
    assert environment(resources)["DEDUP_DEAD_LETTER_TOPIC"] == full
    # The dead letters counter, and its chart.
    (metric,) = [r for r in of(resources, METRIC) if r.name == "dedup-metric-dead-letters"]
    assert (
        'jsonPayload.outcome=("dead_letter_published" OR "dead_letter_unpublished")'
        in (metric.inputs["filter"])
    )
    (board,) = of(resources, DASHBOARD)
    assert "Dead letters by outcome and kind" in board.inputs["dashboardJson"]


def test_an_existing_topic_is_granted_on_not_created(run) -> None:
    existing = "projects/acme-alerts/topics/dead-letters"
    resources = run(deadLetterTopic=existing)
    assert of(resources, TOPIC) == []
    (grant,) = of(resources, TOPIC_GRANT)
    assert (grant.inputs["topic"], grant.inputs["role"]) == (existing, "roles/pubsub.publisher")
    assert environment(resources)["DEDUP_DEAD_LETTER_TOPIC"] == existing


def test_without_the_key_there_is_no_topic_grant_nor_setting(run) -> None:
    resources = run()
    assert of(resources, TOPIC) == of(resources, TOPIC_GRANT) == []
    assert not [r for r in of(resources, METRIC) if r.name.endswith("dead-letters")]
    assert "DEDUP_DEAD_LETTER_TOPIC" not in environment(resources)


@pytest.mark.parametrize(
    "value",
    ["goog-letters", "ab", "projects/acme/topics/x y", "topics/dead-letters", "9letters"],
)
def test_a_bad_topic_is_one_line_naming_the_key(multi_job_config, value) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({**multi_job_config, f"{NS}deadLetterTopic": value})
    message = str(caught.value)
    assert message.startswith(f"{NS}deadLetterTopic: {value!r} is neither a topic id")
    assert "\n" not in message


def test_make_plan_shows_the_topic_and_refuses_a_bad_one_in_one_line(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    project = make_stack({**multi_job_config, f"{NS}deadLetterTopic": "scheduler-dead-letters"})
    result = run_plan("--dir", str(project), "--stack", "test")
    assert result.returncode == 0, result.stderr
    assert f"+ {TOPIC}  dedup-dead-letters" in result.stdout
    assert f"+ {TOPIC_GRANT}  dedup-dead-letters-publisher" in result.stdout
    make_stack({**multi_job_config, f"{NS}deadLetterTopic": "goog-letters"})
    result = run_plan("--dir", str(project), "--stack", "test")
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1 and "deadLetterTopic: 'goog-letters'" in result.stderr
