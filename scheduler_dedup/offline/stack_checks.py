"""What a team's `make test` checks of its stacks: plan, policy check, capacity, for each one.

    python -m scheduler_dedup.offline.stack_checks [--dir DIR]

For every `Pulumi.<stack>.yaml` of DIR: the plan (`scheduler_dedup.offline.plan`:
the program under mocks), the policy check (`scheduler_dedup.offline.policy_check`,
DIR/policies) and the capacity verdict the program itself exports as
`handlerCapacity` (`dedup_schedule.config.capacity`: the requests the stack's jobs
can have in flight, retry windows longer than an interval included, against what the
handler serves). The plan and the policy check run as their own commands, one
process each (a Pulumi program registers its providers once per process), and print
as those commands do.
Exit: 0 every stack passes, 1 a mandatory policy violation or a capacity SHORT,
2 no stack file, or a tool, config or program error.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from dedup_schedule.config.capacity import capacity
from dedup_schedule.config.model import ConfigError
from dedup_schedule.config.parser import parse_config
from scheduler_dedup.offline.stack_file import (
    StackFileError,
    read_project_name,
    read_stack_values,
    stack_names,
)


def capacity_verdict(project_dir: Path, stack: str) -> int:
    """0 when the handler serves what the stack's jobs can have in flight, else 1; 2: bad config."""
    try:
        config = parse_config(read_stack_values(project_dir, stack), read_project_name(project_dir))
    except (ConfigError, StackFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    found = capacity(config)
    print(f"capacity of stack {stack}: {found.summary()}")
    return 0 if found.holds else 1


def _command(module: str, project_dir: Path, stack: str) -> int:
    where = ["--dir", str(project_dir), "--stack", stack]
    return subprocess.run([sys.executable, "-m", module, *where], check=False).returncode


def check_stack(project_dir: Path, stack: str) -> int:
    """The three checks of one stack; the worst status (the plan's 2 stops the others)."""
    print(f"== stack {stack}: plan", flush=True)
    if _command("scheduler_dedup.offline.plan", project_dir, stack) != 0:
        return 2
    print(f"== stack {stack}: policy check", flush=True)
    status = _command("scheduler_dedup.offline.policy_check", project_dir, stack)
    print(f"== stack {stack}: capacity", flush=True)
    return max(status, capacity_verdict(project_dir, stack))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler_dedup.offline.stack_checks",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--dir", default=".", type=Path, help="directory holding Pulumi.yaml")
    project_dir = parser.parse_args(argv).dir.resolve()
    try:
        stacks = stack_names(project_dir)
    except StackFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not stacks:
        print(f"error: no Pulumi.<stack>.yaml in {project_dir}", file=sys.stderr)
        return 2
    results = {stack: check_stack(project_dir, stack) for stack in stacks}
    failed = [stack for stack, status in results.items() if status]
    verdict = f"FAILED: {', '.join(failed)}" if failed else "passed"
    print(f"stack checks {verdict} ({len(stacks)} stack(s): plan, policy check, capacity)")
    return max(results.values())


if __name__ == "__main__":
    sys.exit(main())
