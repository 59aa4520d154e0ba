"""The dead-letter topic the simulated handler publishes to, with Pub/Sub's faults.

A publish may fail before Pub/Sub takes it (an error, nothing stored) or be
stored and lose its answer (an error after storing: the caller cannot tell it
apart from the first); either is drawn per call from the seed. Every stored
copy goes to the history (`History.letter_stored`) with the run's record as the
store held it then, so the oracle sees whether its note already said it went out.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any


class PublishFailed(Exception):
    """Pub/Sub did not answer the publish: stored or not, the caller cannot tell."""


class SimTopic:
    def __init__(
        self,
        rng: random.Random,
        rate: float,
        now: Callable[[], datetime],
        stored: Callable[[datetime, Mapping[str, str]], None],
        healed_at: datetime,
    ) -> None:
        self._rng = rng
        self._rate = rate
        self._now = now
        self._stored = stored
        self._healed_at = healed_at
        self._ids = 0

    def publish(self, data: bytes, attributes: Mapping[str, str]) -> str:
        fault = self._draw()
        if fault == "fail":
            raise PublishFailed("simulated: Pub/Sub unavailable, nothing stored")
        self._ids += 1
        self._stored(self._now(), dict(attributes))
        if fault == "lost":
            raise PublishFailed("simulated: stored, answer lost")
        return str(self._ids)

    def _draw(self) -> Any:
        if self._now() >= self._healed_at or self._rng.random() >= self._rate:
            return None
        return self._rng.choice(("fail", "lost"))
