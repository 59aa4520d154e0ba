"""One broken rule of the oracle: the job and time it is about, and what happened."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Violation:
    job: str
    schedule_time: datetime | None
    rule: str
    detail: str

    def line(self) -> str:
        when = "-" if self.schedule_time is None else f"{self.schedule_time:%Y-%m-%dT%H:%M:%SZ}"
        return f"{self.rule}: {self.job} at {when}: {self.detail}"
