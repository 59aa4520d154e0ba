"""`make policy-check`: evaluate a CrossGuard policy pack against a Pulumi stack offline.

The Pulumi CLI cannot run here, so this plays the engine's part: it runs the
project's program under mocks (`scheduler_dedup.offline.mockrun`), loads the pack by running
its own `__main__.py` with `PolicyPack` captured instead of served, and drives
the SDK's analyzer servicer through the same gRPC messages the engine sends
(GetAnalyzerInfo, Configure, ConfigureStack, Remediate, Analyze per resource,
AnalyzeStack). Enforcement levels, `--policy-pack-config`, schema defaults and
unknown values therefore behave as under `pulumi preview --policy-pack`.

This module is the command line only (arguments, the report, exit status); each
step lives in its own module:

    stack_resources  mocked program resources -> StackResource; `--preview`
    pack_loader      a pack's `PolicyPack` arguments, without its gRPC server
    policy_config    `--policy-pack-config` parsed, layered and validated
    analyzer         `evaluate`: the SDK's servicer, driven as the engine does
    errors           `CheckError`, the one `error: ...` line (exit 2)

Usage: python -m scheduler_dedup.offline.policy_check --dir DIR [--stack STACK]
           [--policy-pack PACK_DIR] [--policy-pack-config FILE.json] [--preview]
           [--virtualenv DIR]

`--preview` approximates the first `pulumi preview` of a new stack: every value
a provider computes, and every input built from one, is unknown.
`--virtualenv` runs the program with its own packages (default: the one
Pulumi.yaml names in runtime.options.virtualenv, when it exists).
Exit: 0 no mandatory violation, 1 mandatory violation(s), 2 the tool or the
program failed (usage, config, pack or program error).
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import Any

from pulumi_policy import EnforcementLevel

from scheduler_dedup.offline.analyzer import Diagnostic, evaluate
from scheduler_dedup.offline.errors import CheckError
from scheduler_dedup.offline.event_loops import close_leftover_loops
from scheduler_dedup.offline.pack_loader import load_pack
from scheduler_dedup.offline.policy_config import parse_policy_config
from scheduler_dedup.offline.stack_file import StackFileError, choose_stack, read_project_name
from scheduler_dedup.offline.stack_resources import as_first_preview, run_stack


def _project_name(project_dir: Path) -> str:
    try:
        return read_project_name(project_dir)
    except StackFileError as exc:
        raise CheckError(str(exc)) from None


def report(diagnostics: list[Diagnostic], out: io.TextIOBase | Any) -> None:
    """One block per violation (level, rule, resource, message), then a summary line.

    Mandatory violations come first, then by rule and resource, so two runs of the
    same stack print the same report whatever order the program registered in.
    """
    ordered = sorted(
        diagnostics,
        key=lambda d: (d.level != EnforcementLevel.MANDATORY, d.policy, d.urn, d.message),
    )
    for d in ordered:
        resource = d.urn or "(stack)"
        print(f"[{d.level.value}] {d.policy}: {resource}", file=out)
        for line in d.message.splitlines():
            print(f"    {line}", file=out)
    mandatory = sum(1 for d in diagnostics if d.level == EnforcementLevel.MANDATORY)
    advisory = len(diagnostics) - mandatory
    verdict = "FAILED" if mandatory else "passed"
    print(
        f"policy check {verdict}: {mandatory} mandatory, {advisory} advisory violation(s)",
        file=out,
    )


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler_dedup.offline.policy_check",
        description="Evaluate a CrossGuard policy pack against a Pulumi stack, offline.",
    )

    def usage_error(message: str) -> None:
        raise CheckError(f"{message} (see --help)")

    parser.error = usage_error  # type: ignore[method-assign]
    parser.add_argument("--dir", default=".", help="Pulumi project directory (has Pulumi.yaml)")
    parser.add_argument(
        "--stack", default=None, help="stack name (Pulumi.<stack>.yaml; default: the only one)"
    )
    parser.add_argument(
        "--policy-pack",
        default=None,
        help="policy pack directory (default: DIR/policies if present, else ./policies)",
    )
    parser.add_argument(
        "--policy-pack-config", default=None, help="JSON policy config, as for `pulumi preview`"
    )
    parser.add_argument(
        "--preview",
        action="store_true",
        help="approximate the first preview of a new stack: provider-computed values unknown",
    )
    parser.add_argument(
        "--virtualenv",
        default=None,
        help="the program's virtualenv (default: Pulumi.yaml runtime.options.virtualenv)",
    )
    return parser.parse_args(argv)


def run(argv: list[str] | None = None, out: Any = None) -> int:
    """The command; returns the exit status instead of exiting."""
    out = out or sys.stdout
    args = _arguments(argv)
    project_dir = Path(args.dir).resolve()
    if not (project_dir / "Pulumi.yaml").is_file():
        raise CheckError(f"{project_dir} has no Pulumi.yaml (pass --dir PROJECT_DIR)")
    if args.policy_pack:
        pack_dir = Path(args.policy_pack).resolve()
    elif (project_dir / "policies" / "PulumiPolicy.yaml").is_file():
        pack_dir = project_dir / "policies"
    else:
        # The project `make` runs in (a template's or a copy's root), not this package's.
        pack_dir = Path.cwd() / "policies"
    config = {}
    if args.policy_pack_config:
        try:
            config = parse_policy_config(Path(args.policy_pack_config).read_text())
        except OSError as exc:
            raise CheckError(f"cannot read policy config: {exc}") from None
    try:
        args.stack = choose_stack(project_dir, args.stack)
    except StackFileError as exc:
        raise CheckError(str(exc)) from None
    pack = load_pack(pack_dir)
    notes: list[str] = []
    virtualenv = Path(args.virtualenv) if args.virtualenv else None
    resources = run_stack(project_dir, args.stack, virtualenv, notes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.preview:
        resources = as_first_preview(resources)
    diagnostics = evaluate(
        pack,
        resources,
        config,
        stack=args.stack,
        project=_project_name(project_dir),
        dry_run=True,
    )
    print(
        f"policy pack {pack.arguments['name']} ({pack_dir}) on stack {args.stack} of "
        f"{project_dir}: {len(resources)} resources",
        file=out,
    )
    report(diagnostics, out)
    return 1 if any(d.level == EnforcementLevel.MANDATORY for d in diagnostics) else 0


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    finally:
        close_leftover_loops()


def _main(argv: list[str] | None) -> int:
    try:
        return run(argv)
    except CheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse --help (a program's sys.exit is a ProgramFailed)
        return exc.code if isinstance(exc.code, int) else 2
    except Exception as exc:  # a failing program or pack: one line, not a traceback
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"error: {type(exc).__name__}: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
