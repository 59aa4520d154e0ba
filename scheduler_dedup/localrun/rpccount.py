"""Count Firestore RPCs at the client, per method, for tests and benchmarks.

The wrappers sit on the client's generated API object, below the retry and
transaction helpers, so every request sent to the server is counted once.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from typing import Any

RPC_METHODS = (
    "batch_get_documents",
    "begin_transaction",
    "commit",
    "rollback",
    "run_query",
    "get_document",
    "update_document",
    "delete_document",
    "create_document",
    "batch_write",
)


class RpcCounter:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()

    def attach(self, client: Any) -> RpcCounter:
        """Wrap the RPC methods of a google.cloud.firestore.Client; returns self."""
        api = client._firestore_api
        for name in RPC_METHODS:
            original = getattr(api, name)
            setattr(api, name, self._counted(name, original))
        return self

    def _counted(self, name: str, original: Any) -> Any:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls[name] += 1
            return original(*args, **kwargs)

        return wrapper
