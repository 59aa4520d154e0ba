"""The repository's own stacks: every `Pulumi.<stack>.yaml` beside Pulumi.yaml.

Tests that check what a team deploys parametrize over all of them, so a team
that deletes the example stack and adds its own gets its own checked; tests
that only need some valid stack of this repo take the first.
"""

from __future__ import annotations

from pathlib import Path

from offline.stack_file import stack_file, stack_names

REPO_ROOT = Path(__file__).resolve().parent.parent
REPO_STACKS = tuple(stack_names(REPO_ROOT))
# Some stack of the repo, for tests that copy the program and change it.
ANY_STACK = REPO_STACKS[0] if REPO_STACKS else "none"


def repo_stack_file(stack: str) -> Path:
    return stack_file(REPO_ROOT, stack)
