"""Loading a Python policy pack without starting its gRPC server.

A pack's `__main__.py` constructs `pulumi_policy.PolicyPack`, whose constructor
serves the analyzer over gRPC and blocks until the engine goes away. Offline
there is no engine, so `load_pack` runs the entry point with `PolicyPack`
replaced by a recorder and keeps the arguments; `LoadedPack.servicer()` then
builds the SDK's own analyzer servicer from them, exactly as `PolicyPack` would.
"""

from __future__ import annotations

import contextlib
import inspect
import runpy
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi_policy
from pulumi_policy import EnforcementLevel
from pulumi_policy.policy import _PolicyAnalyzerServicer

from scheduler_dedup.offline.errors import CheckError

# What the SDK reports as the pack version; the CLI shows PulumiPolicy.yaml's instead.
SDK_PACK_VERSION = "0.0.1"


@dataclass
class LoadedPack:
    """The arguments a pack's `__main__.py` passed to `PolicyPack`."""

    directory: Path
    arguments: dict[str, Any]

    def servicer(self) -> _PolicyAnalyzerServicer:
        """A fresh analyzer servicer, built exactly as `PolicyPack.__init__` builds it."""
        a = self.arguments
        return _PolicyAnalyzerServicer(
            a["name"],
            SDK_PACK_VERSION,
            a["policies"],
            a.get("enforcement_level") or EnforcementLevel.ADVISORY,
            a.get("initial_config"),
            a.get("description"),
            a.get("display_name"),
            a.get("readme"),
            a.get("provider"),
            a.get("tags"),
            a.get("repository"),
        )


@contextlib.contextmanager
def _captured_policy_pack(captured: list[dict[str, Any]]) -> Iterator[None]:
    real = pulumi_policy.PolicyPack
    signature = inspect.signature(real.__init__)

    class _Capture:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            bound = signature.bind(self, *args, **kwargs)
            arguments = dict(bound.arguments)
            arguments.pop("self")
            captured.append(arguments)

    pulumi_policy.PolicyPack = _Capture  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        pulumi_policy.PolicyPack = real  # type: ignore[misc]


def _forget_foreign_modules(pack_dir: Path) -> None:
    """Drop cached modules that share a name with the pack's but come from elsewhere.

    Two copies of a pack (this repo's and a user's edited one) use the same
    package name; the one being loaded must be imported from its own directory.
    """
    local = {p.stem for p in pack_dir.glob("*.py")} | {
        p.parent.name for p in pack_dir.glob("*/__init__.py")
    }
    for name in list(sys.modules):
        top = name.split(".")[0]
        if top not in local or top == "__main__":
            continue
        origin = getattr(sys.modules[name], "__file__", None) or ""
        if not Path(origin).resolve().is_relative_to(pack_dir.resolve()):
            del sys.modules[name]


def load_pack(pack_dir: Path) -> LoadedPack:
    """Runs the pack's entry point with `PolicyPack` captured instead of served."""
    main = pack_dir / "__main__.py"
    if not (pack_dir / "PulumiPolicy.yaml").is_file() or not main.is_file():
        raise CheckError(f"{pack_dir} is not a Python policy pack (PulumiPolicy.yaml, __main__.py)")
    captured: list[dict[str, Any]] = []
    _forget_foreign_modules(pack_dir)
    sys.path.insert(0, str(pack_dir))
    try:
        with _captured_policy_pack(captured):
            runpy.run_path(str(main), run_name="__main__")
    finally:
        sys.path.remove(str(pack_dir))
    if len(captured) != 1:
        raise CheckError(f"{main} must construct exactly one PolicyPack, it built {len(captured)}")
    arguments = captured[0]
    if not arguments.get("policies"):
        raise CheckError(f"{main}: the PolicyPack has no policies")
    return LoadedPack(pack_dir, arguments)
