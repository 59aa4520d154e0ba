"""The policy pack installs on its own, so it carries a copy of the shared facts module.

The copy must stay byte-identical to the handler's, or the pack would judge stacks
by other limits and defaults than the program and the handler use.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "handler" / "runledger" / "facts.py"
COPY = REPO / "policies" / "dedup_policies" / "facts.py"


def test_policy_pack_copy_of_the_shared_facts_is_byte_identical() -> None:
    assert COPY.read_bytes() == SOURCE.read_bytes(), (
        f"{COPY.relative_to(REPO)} differs from {SOURCE.relative_to(REPO)}; "
        f"copy it again: cp {SOURCE.relative_to(REPO)} {COPY.relative_to(REPO)}"
    )
