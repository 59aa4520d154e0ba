"""Fixtures for the policy pack tests: the compliant stack and an engine to judge it.

Every evaluation goes through `scheduler_dedup.offline.analyzer.evaluate`, i.e. the SDK's
own analyzer servicer, so levels, config and unknowns behave as under the CLI.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from policy_stack import compliant_stack, with_function_uri

from scheduler_dedup.offline.analyzer import Diagnostic, evaluate
from scheduler_dedup.offline.pack_loader import LoadedPack, load_pack
from scheduler_dedup.offline.policy_config import parse_policy_config
from scheduler_dedup.offline.stack_resources import StackResource
from tests.stacks import PACK_DIR

Check = Callable[..., list[Diagnostic]]


@pytest.fixture
def stack() -> list[StackResource]:
    """A fresh compliant stack; tests edit it freely."""
    return with_function_uri(compliant_stack())


@pytest.fixture(scope="session")
def pack() -> LoadedPack:
    return load_pack(PACK_DIR)


@pytest.fixture
def check(pack: LoadedPack) -> Check:
    """check(resources, config_json=None) -> diagnostics, as the engine would report them."""

    def run(resources: list[StackResource], config: str | None = None) -> list[Diagnostic]:
        return evaluate(pack, resources, parse_policy_config(config or ""), stack="test")

    return run
