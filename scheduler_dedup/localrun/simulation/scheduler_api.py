"""Cloud Scheduler's `jobs.list` and Cloud Logging's `entries.list` as the world serves them:
the fault classes `pause_api_versions` and `unreadable_scheduler`.

The audit reads the live jobs and their pause log through the real code
(`audit.scheduler_state.session_listing`, `audit.pause_log`), given this object as its
HTTP session: it answers the REST calls from the world's Cloud Scheduler. Each
PauseJob/ResumeJob call is logged under the API version it went through: v1 (the
stack, the console, `gcloud`) or, with `pause_api_versions`, v1beta1 and v1alpha1
(`gcloud beta|alpha scheduler jobs pause`). With `unreadable_scheduler` some calls
are refused (403), rate-limited (429), fail (500) or time out, and each log entry
becomes readable only after an ingestion lag of up to 5 minutes.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from runledger.audit.pause_log import SERVICE

if TYPE_CHECKING:
    from scheduler_dedup.localrun.simulation.scheduler import CloudScheduler

VERSIONS = ("v1", "v1beta1", "v1alpha1")
# The share of REST calls that fail, what they fail with, and the log's ingestion lags.
FAULT_RATES = (0.02, 0.1, 0.3)
FAULTS = (403, 429, 500, "timeout")
# Seconds to minutes, within the lag the audit waits for (`audit.pauses.PAUSE_LOG_LAG`).
LAGS_S = (0, 2, 10, 60, 180, 300)
_SINCE = re.compile(r'timestamp>="([^"]+)"')


class Timeout(Exception):
    """The call got no answer in time (as `requests.Timeout` would)."""


@dataclass(frozen=True)
class _Answer:
    status_code: int
    body: dict[str, Any]

    def json(self) -> dict[str, Any]:
        return self.body


@dataclass
class SchedulerApi:
    scheduler: CloudScheduler
    rng: random.Random
    project: str
    region: str
    now: Callable[[], datetime]  # the true time
    versions: tuple[str, ...] = ("v1",)
    fault_rate: float = 0.0
    lags_s: tuple[int, ...] = (0,)
    # Per logged call (job, its index in the job's changes): its version and ingestion lag.
    _logged: dict[tuple[str, int], tuple[str, timedelta]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def _fault(self) -> _Answer | None:
        if not self.fault_rate or self.rng.random() >= self.fault_rate:
            return None
        fault = self.rng.choice(FAULTS)
        self.counts[str(fault)] = self.counts.get(str(fault), 0) + 1
        if fault == "timeout":
            raise Timeout("simulated timeout")
        return _Answer(int(fault), {})

    def get(self, url: str, params: dict[str, str], timeout: float) -> _Answer:
        """`projects.locations.jobs.list`: every job, one page."""
        failed = self._fault()
        if failed is not None:
            return failed
        jobs = [
            {
                "name": f"projects/{self.project}/locations/{self.region}/jobs/{job.id}",
                "state": "PAUSED" if job.paused else "ENABLED",
                "schedule": job.schedule,
                "timeZone": job.time_zone,
            }
            for job in self.scheduler.jobs.values()
        ]
        return _Answer(200, {"jobs": jobs})

    def post(self, url: str, json: dict[str, Any], timeout: float) -> _Answer:
        """`entries.list`: the PauseJob/ResumeJob (and DeleteJob/CreateJob) entries since
        the filter's timestamp that have been ingested by now, oldest first, one page."""
        failed = self._fault()
        if failed is not None:
            return failed
        found = _SINCE.search(json.get("filter", ""))
        since = datetime.fromisoformat(found.group(1).replace("Z", "+00:00")) if found else None
        now = self.now()
        entries = []
        for job in self.scheduler.jobs.values():
            for index, change in enumerate(job.changes):
                version, lag = self._log_of(job.id, index)
                if change.at + lag > now or (since is not None and change.at < since):
                    continue
                method = change.method  # PauseJob, ResumeJob, DeleteJob, CreateJob
                entries.append(
                    {
                        "timestamp": change.at.astimezone(UTC).isoformat(),
                        "protoPayload": {
                            "serviceName": SERVICE,
                            "methodName": f"google.cloud.scheduler.{version}.CloudScheduler."
                            + method,
                            "resourceName": f"projects/{self.project}/locations/{self.region}"
                            f"/jobs/{job.id}",
                        },
                    }
                )
        entries.sort(key=lambda entry: entry["timestamp"])
        return _Answer(200, {"entries": entries})

    def _log_of(self, job: str, index: int) -> tuple[str, timedelta]:
        """The API version a call went through and its ingestion lag, drawn once."""
        logged = self._logged.get((job, index))
        if logged is None:
            lag = timedelta(seconds=self.rng.choice(self.lags_s))
            logged = (self.rng.choice(self.versions), lag)
            self._logged[job, index] = logged
        return logged
