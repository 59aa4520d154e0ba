"""The stack's dead-letter topic on Pub/Sub, connected on its first publish.

Google's client is imported then, never on a delivery that succeeds. It finds
the emulator through PUBSUB_EMULATOR_HOST, as every Google Pub/Sub client does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from runledger.delivery.dead_letter import Topic

# One publish call's deadline, and how long the handler waits for its answer: a dead
# letter is sent inside the failed run's request, which Cloud Run bounds anyway.
PUBLISH_TIMEOUT_S = 30.0


class PubSubTopic:
    """`dead_letter.Topic` on one Pub/Sub topic (`projects/P/topics/T`)."""

    def __init__(self, client: Any, topic_name: str) -> None:
        self._client = client
        self._name = topic_name

    def publish(self, data: bytes, attributes: Mapping[str, str]) -> str:
        future = self._client.publish(self._name, data, timeout=PUBLISH_TIMEOUT_S, **attributes)
        return str(future.result(timeout=PUBLISH_TIMEOUT_S))


def pubsub_topic(topic_name: str) -> Callable[[], Topic]:
    """The topic, its client made on first use (once, whichever request thread asks first)."""
    made: list[Topic] = []
    lock = threading.Lock()

    def topic() -> Topic:
        with lock:
            if not made:
                from google.cloud import pubsub_v1

                made.append(PubSubTopic(pubsub_v1.PublisherClient(), topic_name))
            return made[0]

    return topic
