"""Inside a Cloud Run job started by `cloud_run_job_target`: which run and task this is.

Cloud Run retries a failed task in a fresh container with the same task index,
and the target passes the same run key to every task of the execution, so
(run key, task index) names the task's work stably across retries: use it as
the key of the task's outputs and checkpoints in whatever store the job writes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

# The variable `cloud_run_job_target` sets to the run key. Kept here, free of
# Google client imports, so a job's container can use this module on its own.
TOKEN_ENV = "IDEMPOTENCY_TOKEN"
_PART = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


@dataclass(frozen=True)
class TaskIdentity:
    """`token` is the run key (or the execution name when started by hand)."""

    token: str
    index: int
    count: int
    attempt: int
    scheduled: bool

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, token_env: str = TOKEN_ENV
    ) -> TaskIdentity:
        env = os.environ if env is None else env

        def number(name: str, default: int) -> int:
            raw = env.get(name, str(default)).strip()
            if not raw.isdigit():
                raise ValueError(f"{name}={raw!r} is not a whole number")
            return int(raw)

        token = env.get(token_env, "").strip()
        scheduled = bool(token)
        if not scheduled:
            # Started outside the scheduler (console, gcloud): the execution is
            # the unit that Cloud Run's task retries share.
            token = env.get("CLOUD_RUN_EXECUTION", "").strip()
        if not token:
            raise ValueError(f"neither {token_env} nor CLOUD_RUN_EXECUTION is set")
        return cls(
            token=token,
            index=number("CLOUD_RUN_TASK_INDEX", 0),
            count=number("CLOUD_RUN_TASK_COUNT", 1),
            attempt=number("CLOUD_RUN_TASK_ATTEMPT", 0),
            scheduled=scheduled,
        )

    def key(self, *parts: str) -> str:
        """A key for this task's item `parts`, the same on every attempt of the task."""
        for part in parts:
            if not _PART.fullmatch(part):
                raise ValueError(f"key part {part!r} must match {_PART.pattern}")
        return "/".join([self.token, f"task-{self.index}", *parts])

    def owns(self, item_number: int) -> bool:
        """Whether item `item_number` of a fixed, ordered input falls to this task."""
        return item_number % self.count == self.index
