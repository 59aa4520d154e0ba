"""The project and stack files on disk, read without the Pulumi CLI.

The one reader of `Pulumi.yaml` and `Pulumi.<stack>.yaml` for every offline tool:
`scheduler_dedup.offline.mockrun` (which runs any Pulumi Python program the way the
language host would, also in the program's own virtualenv, so this needs nothing but
PyYAML), `scheduler_dedup.offline.policy_check`, and the local demo
(`scheduler_dedup.localrun.demo_stack`). The files are decoded as the Pulumi CLI decodes
them (`scheduler_dedup.offline.stack_yaml`). Where the stack
file lives follows the project file reference ("Pulumi project file reference":
`stackConfigDir`, relative to `Pulumi.yaml`, default its own directory).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from scheduler_dedup.offline.stack_yaml import StackYamlError, load


class StackFileError(ValueError):
    """A project or stack file is missing or malformed; the message names the file."""


def _read_yaml(path: Path) -> Any:
    try:
        return load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise StackFileError(f"{path}: cannot read ({exc.strerror})") from None
    except StackYamlError as exc:
        raise StackFileError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise StackFileError(f"{path}: not valid YAML ({exc})") from None


def read_project(project_dir: Path) -> dict[str, Any]:
    """The `Pulumi.yaml` of the project in `project_dir`, which must name the project."""
    project_file = Path(project_dir) / "Pulumi.yaml"
    document = _read_yaml(project_file)
    name = document.get("name") if isinstance(document, dict) else None
    if not isinstance(name, str) or not name:
        raise StackFileError(f"{project_file}: has no project name")
    return document


def read_project_name(project_dir: Path) -> str:
    """The `name:` of the Pulumi project in `project_dir` (the namespace of its own keys)."""
    return read_project(project_dir)["name"]


def stack_file(project_dir: Path, stack: str) -> Path:
    """Where `stack`'s settings live: `Pulumi.<stack>.yaml` in the project's stackConfigDir."""
    project_dir = Path(project_dir)
    config_dir = read_project(project_dir).get("stackConfigDir") or "."
    return project_dir / str(config_dir) / f"Pulumi.{stack}.yaml"


def stack_names(project_dir: Path) -> list[str]:
    """Every stack with a settings file in the project's stackConfigDir, sorted."""
    config_dir = stack_file(project_dir, "_").parent
    names = (path.name[len("Pulumi.") : -len(".yaml")] for path in config_dir.glob("Pulumi.*.yaml"))
    return sorted(names)


def choose_stack(project_dir: Path, stack: str | None) -> str:
    """`stack` if given, else the project's one stack; several or none is a one-line error.

    The offline tools take no stack from a Pulumi backend (there is none here),
    so without `--stack` the only unambiguous choice is the single stack file.
    """
    if stack:
        return stack
    names = stack_names(project_dir)
    if len(names) == 1:
        return names[0]
    config_dir = stack_file(project_dir, "_").parent
    if not names:
        raise StackFileError(f"{config_dir}: no Pulumi.<stack>.yaml here; create one")
    raise StackFileError(
        f"several stacks in {config_dir} ({', '.join(names)}): name one with STACK=<name> "
        "(make) or --stack <name>"
    )


def read_stack_values(project_dir: Path, stack: str) -> dict[str, Any]:
    """The raw `config:` map of `stack`'s settings file (empty when it sets none)."""
    path = stack_file(project_dir, stack)
    document = _read_yaml(path) or {}
    config = (document.get("config") or {}) if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise StackFileError(f"{path}: 'config' must be a map")
    return config


def main(argv: Sequence[str] | None = None) -> int:
    """Print the project's stack names, one a line: what `make policy-check-all` loops over."""
    parser = argparse.ArgumentParser(
        prog="python -m scheduler_dedup.offline.stack_file", description=main.__doc__
    )
    parser.add_argument("--dir", default=".", type=Path, help="directory holding Pulumi.yaml")
    args = parser.parse_args(argv)
    try:
        names = stack_names(args.dir)
    except StackFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
