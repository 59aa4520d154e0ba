"""Check what is known, then admit what is not.

During a preview some values (a new account's email, a new service's URL) are
unknown, and reading one raises `UnknownValueError`, which the SDK turns into
an advisory "can't run policy ... during preview" note. A stack rule checks
many independent things; letting the first unknown abort all of them would
hide real violations elsewhere. `Deferred` runs each check, remembers the first
unknown, and re-raises it at the end: violations already reported stay in the
engine's response, and the note still says the rule could not finish.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

from pulumi_policy.proxy import UnknownValueError


class Deferred:
    """Context manager: `with Deferred() as later: later.run(check, ...)`."""

    def __init__(self) -> None:
        self.first: UnknownValueError | None = None

    def run(self, check: Callable[..., Any], *args: Any) -> None:
        try:
            check(*args)
        except UnknownValueError as unknown:
            self.first = self.first or unknown

    def __enter__(self) -> Deferred:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if kind is None and self.first is not None:
            raise self.first
