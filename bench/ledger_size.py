"""How big each side's ledger gets: documents and bytes per run, over jobs and runs.

Bytes follow Firestore's published storage-size rules (string = UTF-8 length
+ 1, number and timestamp = 8, boolean and null = 1, document = name + fields
+ 32), which is what storage is billed on; index entries come on top and
scale with the number of indexed fields, also reported. Both sides keep one
document per run and rely on a TTL policy to drop it after the retention, so
the live size is jobs x runs per retention window x bytes per document.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.cloud import firestore

from bench.inprocess import make_side
from bench.schedule import ScheduleTimes, delivery_headers
from runledger.config import COLLECTION_ENV
from runledger.facts import DEFAULT_COLLECTION

_DOC_OVERHEAD = 32
# Sizes are computed as if stored under the default collection name, so the
# bench's per-side collection names do not tilt the comparison.
NOMINAL_COLLECTION = DEFAULT_COLLECTION
_NAME_OVERHEAD = 16


def _text_size(text: str) -> int:
    return len(text.encode()) + 1


def value_size(value: Any) -> int:
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, int | float | datetime):
        return 8
    if isinstance(value, str):
        return _text_size(value)
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, Mapping):
        return sum(_text_size(key) + value_size(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return sum(value_size(item) for item in value)
    raise TypeError(f"no storage size rule for {type(value).__name__}")


def document_size(collection: str, doc_id: str, data: Mapping[str, Any]) -> int:
    name = _text_size(collection) + _text_size(doc_id) + _NAME_OVERHEAD
    return name + value_size(data) + _DOC_OVERHEAD


@dataclass(frozen=True)
class LedgerSize:
    jobs: int
    runs_per_job: int
    documents: int
    total_bytes: int
    fields_per_document: int


def measure_growth(
    side_name: str,
    env: Mapping[str, str],
    client: firestore.Client,
    job_ids: tuple[str, ...],
    runs_per_job: int,
    times: ScheduleTimes,
) -> LedgerSize:
    """First-deliver `runs_per_job` runs of each job into a fresh collection, then weigh it."""
    # A collection of its own, so the count is this measurement's documents only.
    collection = f"size_{side_name}_{len(job_ids)}x{runs_per_job}_{uuid.uuid4().hex[:8]}"
    side = make_side(side_name, {**env, COLLECTION_ENV: collection}, client, client)
    for _ in range(runs_per_job):
        schedule_time = times.next()
        for job in job_ids:
            status = side.deliver(delivery_headers(schedule_time, job))
            if status != 200:
                raise RuntimeError(f"{side_name}: first delivery of {job} answered {status}")
    sizes: list[int] = []
    fields = 0
    for snapshot in client.collection(collection).stream():
        data = snapshot.to_dict() or {}
        sizes.append(document_size(NOMINAL_COLLECTION, snapshot.id, data))
        fields = max(fields, len(data))
    return LedgerSize(len(job_ids), runs_per_job, len(sizes), sum(sizes), fields)
