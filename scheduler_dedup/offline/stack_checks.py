"""What a team's `make test` checks of its stacks: plan, policy check, capacity, for each one.

    python -m scheduler_dedup.offline.stack_checks [--dir DIR] [--verbose]

For every `Pulumi.<stack>.yaml` of DIR: the plan (`scheduler_dedup.offline.plan`:
the program under mocks), the policy check (`scheduler_dedup.offline.policy_check`,
DIR/policies) and the capacity verdict the program itself exports as
`handlerCapacity` (`dedup_schedule.config.capacity`: the requests the stack's jobs
can have in flight, retry windows longer than an interval included, against what the
handler serves). The plan and the policy check run as their own commands, one
process each (a Pulumi program registers its providers once per process). Quiet
when green: of a plan that succeeds only its warnings and its summary line print, so
`make test` fits a screen; a plan that fails prints whole, and `--verbose`
(`make test VERBOSE=1`) prints every plan as `make plan` does.
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


def _command(
    module: str, project_dir: Path, stack: str, capture: bool = False
) -> subprocess.CompletedProcess[str]:
    where = ["--dir", str(project_dir), "--stack", stack]
    return subprocess.run(
        [sys.executable, "-m", module, *where], capture_output=capture, text=True, check=False
    )


def _quiet_plan(project_dir: Path, stack: str) -> int:
    """The plan, of which a success prints its warnings and summary line; a failure all of it."""
    done = _command("scheduler_dedup.offline.plan", project_dir, stack, capture=True)
    if done.returncode != 0:
        print(done.stdout, end="", flush=True)
    print(done.stderr, end="", file=sys.stderr, flush=True)  # warnings, notes, the error
    if done.returncode == 0:
        summary = [line for line in done.stdout.splitlines() if line.startswith("summary: ")]
        print("\n".join(summary), flush=True)
    return done.returncode


def check_stack(project_dir: Path, stack: str, verbose: bool = False) -> int:
    """The three checks of one stack; the worst status (the plan's 2 stops the others)."""
    print(f"== stack {stack}: plan", flush=True)
    if verbose:
        planned = _command("scheduler_dedup.offline.plan", project_dir, stack).returncode
    else:
        planned = _quiet_plan(project_dir, stack)
    if planned != 0:
        return 2
    print(f"== stack {stack}: policy check", flush=True)
    status = _command("scheduler_dedup.offline.policy_check", project_dir, stack).returncode
    print(f"== stack {stack}: capacity", flush=True)
    return max(status, capacity_verdict(project_dir, stack))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler_dedup.offline.stack_checks",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--dir", default=".", type=Path, help="directory holding Pulumi.yaml")
    parser.add_argument(
        "--verbose", action="store_true", help="print every plan whole, as `make plan` does"
    )
    args = parser.parse_args(argv)
    project_dir = args.dir.resolve()
    try:
        stacks = stack_names(project_dir)
    except StackFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not stacks:
        print(f"error: no Pulumi.<stack>.yaml in {project_dir}", file=sys.stderr)
        return 2
    results = {stack: check_stack(project_dir, stack, args.verbose) for stack in stacks}
    failed = [stack for stack, status in results.items() if status]
    verdict = f"FAILED: {', '.join(failed)}" if failed else "passed"
    if not args.verbose:
        print("(each plan whole: make plan STACK=<stack>, or make test VERBOSE=1)")
    print(f"stack checks {verdict} ({len(stacks)} stack(s): plan, policy check, capacity)")
    return max(results.values())


if __name__ == "__main__":
    sys.exit(main())
