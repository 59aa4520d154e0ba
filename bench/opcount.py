"""Count billable document operations at the client: documents read and written.

RPC counts say how many round trips a delivery waits for; Firestore bills by
documents read and written instead, so both are reported. Reads are the
documents a BatchGet asked for (a lookup of a missing document is billed
too); writes are the writes of commits that succeeded. Like
`scheduler_dedup.localrun.rpccount`, this wraps the client's generated API object.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any


def _field(request: Any, name: str) -> Any:
    return request[name] if isinstance(request, dict) else getattr(request, name)


class OpCounter:
    def __init__(self) -> None:
        self.reads = 0
        self.writes = 0
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.reads = 0
            self.writes = 0

    def attach(self, client: Any) -> OpCounter:
        """Wrap commit and batch_get_documents of a firestore.Client; returns self."""
        api = client._firestore_api
        api.commit = self._wrap(api.commit, self._count_commit)
        api.batch_get_documents = self._wrap(api.batch_get_documents, self._count_get)
        return self

    def _count_commit(self, request: Any) -> None:
        self.writes += len(_field(request, "writes"))

    def _count_get(self, request: Any) -> None:
        self.reads += len(_field(request, "documents"))

    def _wrap(self, original: Any, count: Callable[[Any], None]) -> Any:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)  # a failed commit writes nothing
            request = kwargs.get("request", args[0] if args else None)
            if request is not None:
                with self._lock:
                    count(request)
            return result

        return wrapper
