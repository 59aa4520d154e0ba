"""The dead-letter topic (`deadLetterTopic`) and the runtime account's right to publish to it.

The handler publishes each final failure there (`runledger.delivery.dead_letter`).
A bare topic id makes the stack create the topic in its project (and enable the
Pub/Sub API); a full `projects/P/topics/T` names an existing one. Either way the
runtime account gets roles/pubsub.publisher on that one topic
(`pubsub.TopicIAMMember`), never on the project: the policy pack refuses a
project-wide publisher grant (`iam-pubsub-publisher-on-topic`).
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from dedup_schedule.config.model import ScheduleConfig

PUBLISHER_ROLE = "roles/pubsub.publisher"
# How long the topic keeps a letter no subscription has taken yet: a consumer added
# after an outage still finds the week's letters (Pub/Sub's maximum is 31 days).
RETENTION = "604800s"


def dead_letter_topic(
    cfg: ScheduleConfig,
    runtime_member: pulumi.Input[str],
    apis: tuple[pulumi.Resource, ...],
    parent: pulumi.Resource,
) -> pulumi.Resource | None:
    """The topic's publisher grant (None without `deadLetterTopic`), creating the topic first."""
    if cfg.dead_letter_topic is None:
        return None
    prefix = cfg.name_prefix
    own = pulumi.ResourceOptions(parent=parent, depends_on=list(apis))
    topic: pulumi.Input[str] = cfg.dead_letter_topic
    if cfg.creates_dead_letter_topic:
        api = gcp.projects.Service(
            f"{prefix}-api-pubsub",
            gcp.projects.ServiceArgs(
                project=cfg.project,
                service="pubsub.googleapis.com",
                disable_on_destroy=False,
                disable_dependent_services=False,
            ),
            opts=pulumi.ResourceOptions(parent=parent),
        )
        created = gcp.pubsub.Topic(
            f"{prefix}-dead-letters",
            gcp.pubsub.TopicArgs(
                project=cfg.project,
                name=cfg.dead_letter_topic.rsplit("/", 1)[-1],
                message_retention_duration=RETENTION,
                labels={"scheduler-dedup": "dead-letters"},
            ),
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[*apis, api]),
        )
        topic = created.id  # projects/P/topics/T
    return gcp.pubsub.TopicIAMMember(
        f"{prefix}-dead-letters-publisher",
        gcp.pubsub.TopicIAMMemberArgs(topic=topic, role=PUBLISHER_ROLE, member=runtime_member),
        opts=own,
    )
