"""A job's `overlap` in the stack config: allow (the default), skip or delay.

The handler reads it from the job's DEDUP_SCHEDULES entry (`runledger.ledger.overlap`
says what each policy does); an unknown value is refused here, naming the key,
so a typo never deploys a job that silently overlaps.
"""

from __future__ import annotations

from dedup_schedule.config.model import ConfigError
from dedup_schedule.config.values import ConfigValues, did_you_mean
from runledger import facts


def parse_overlap(job: ConfigValues) -> str:
    """`jobs[i].overlap`: one of `facts.OVERLAP_POLICIES`, `allow` when absent."""
    value = job.raw("overlap")
    if value is None:
        return facts.OVERLAP_ALLOW
    if not isinstance(value, str) or value not in facts.OVERLAP_POLICIES:
        choices = ", ".join(facts.OVERLAP_POLICIES)
        hint = did_you_mean(value, facts.OVERLAP_POLICIES) if isinstance(value, str) else ""
        raise ConfigError(f"{job.key('overlap')}: {value!r} is not one of {choices}{hint}")
    return value
