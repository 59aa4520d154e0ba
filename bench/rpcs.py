"""Firestore round trips and billed document operations per delivery, per scenario.

Each scenario sets the run up (uncounted), then counts exactly one delivery:
a first delivery, a duplicate of a completed run, a duplicate while another
attempt holds a live lease, and a delivery after that lease expired (the
crashed-instance case). The counts are exact, not sampled.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bench.inprocess import InProcessSide
from bench.opcount import OpCounter
from bench.schedule import ScheduleTimes, delivery_headers
from scheduler_dedup.localrun.rpccount import RpcCounter

FIRST = "first delivery"
DUP_COMPLETED = "duplicate of completed run"
DUP_IN_PROGRESS = "duplicate of in-progress run"
RECLAIM = "reclaim of expired lease"
SCENARIOS = (FIRST, DUP_COMPLETED, DUP_IN_PROGRESS, RECLAIM)
EXPECTED_STATUS = {FIRST: 200, DUP_COMPLETED: 200, DUP_IN_PROGRESS: 409, RECLAIM: 200}
# How far past its lease the crashed attempt is: more than the handler's
# allowance for clock skew between instances (2 s).
EXPIRED_BY = timedelta(seconds=60)


@dataclass(frozen=True)
class RpcSample:
    rpcs: int
    by_method: dict[str, int]
    reads: int
    writes: int
    status: int


def measure(
    side: InProcessSide,
    rpc: RpcCounter,
    ops: OpCounter,
    scenario: str,
    times: ScheduleTimes,
) -> RpcSample:
    headers = delivery_headers(times.next())
    now = datetime.now(UTC)
    if scenario == DUP_COMPLETED:
        side.deliver(headers)
    elif scenario == DUP_IN_PROGRESS:
        side.preclaim(headers, now)
    elif scenario == RECLAIM:
        side.preclaim(headers, now - side.settings.lease - EXPIRED_BY)
    rpc.reset()
    ops.reset()
    status = side.deliver(headers)
    return RpcSample(rpc.total, dict(rpc.calls), ops.reads, ops.writes, status)
