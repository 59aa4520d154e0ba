"""What a run under mocks reads from the project: Pulumi.yaml and Pulumi.<stack>.yaml.

The files are read with the offline tools' one stack-file reader
(`scheduler_dedup.offline.stack_file`); this module turns them into what the Python language
host would hand the program: the project (name, `main`, its virtualenv), the
interpreter to run it with, and the stack config as PULUMI_CONFIG carries it.
Nothing here is specific to this repository, so it serves any Pulumi Python
program. Unreadable files raise `ProgramFailed` with the reader's message.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler_dedup.offline.failures import ProgramFailed
from scheduler_dedup.offline.stack_file import StackFileError, read_project, read_stack_values
from scheduler_dedup.offline.stack_yaml import StackYamlError, cli_warnings, config_json

# What an encrypted (`secure:`) stack value becomes offline: it cannot be decrypted.
SECRET_PLACEHOLDER = "offline-placeholder"


@dataclass(frozen=True)
class Project:
    """The Pulumi.yaml settings a run needs: project name, main program, virtualenv."""

    name: str
    program: Path
    virtualenv: Path | None


def read_program(project_dir: Path) -> Project:
    """The project of `project_dir`; ProgramFailed unless it is a Python program with a main."""
    try:
        document = read_project(project_dir)
    except StackFileError as error:
        raise ProgramFailed(str(error)) from None
    runtime = document.get("runtime")
    runtime_name = runtime.get("name") if isinstance(runtime, dict) else runtime
    if runtime_name != "python":
        raise ProgramFailed(
            f"{project_dir / 'Pulumi.yaml'}: runtime is {runtime_name!r}, not python"
        )
    options = runtime.get("options") if isinstance(runtime, dict) else None
    virtualenv = options.get("virtualenv") if isinstance(options, dict) else None
    program = project_dir / str(document.get("main") or ".")
    if program.is_dir() and not (program / "__main__.py").is_file():
        raise ProgramFailed(f"{program}: no __main__.py")
    if not program.exists():
        raise ProgramFailed(f"{program}: main program not found")
    return Project(
        name=document["name"],
        program=program,
        virtualenv=project_dir / str(virtualenv) if isinstance(virtualenv, str) else None,
    )


def _is_secure(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def _without_secure(value: Any) -> tuple[Any, bool]:
    """`value` with every `{secure: ...}` replaced by the placeholder; whether any was."""
    if _is_secure(value):
        return SECRET_PLACEHOLDER, True
    if isinstance(value, dict):
        pairs = {key: _without_secure(item) for key, item in value.items()}
        return {key: item for key, (item, _) in pairs.items()}, any(f for _, f in pairs.values())
    if isinstance(value, list):
        items = [_without_secure(item) for item in value]
        return [item for item, _ in items], any(f for _, f in items)
    return value, False


@dataclass
class StackConfig:
    """The stack config as strings, the keys that were encrypted, notes on what was assumed,
    and warnings on what the Pulumi CLI warns of or rewrites (`cli_warnings`)."""

    values: dict[str, str]
    secret_keys: list[str]
    notes: list[str]
    warnings: list[str]


def stack_config(project_dir: Path, stack: str) -> StackConfig:
    """The stack's config map as the language host passes it: every value a string.

    Encrypted (`secure:`) values need the stack's secrets provider, which an
    offline run does not have: each becomes SECRET_PLACEHOLDER, still marked
    secret, and a note names the keys, so the run goes on and says what it assumed.
    """
    try:
        config = read_stack_values(project_dir, stack)
    except StackFileError as error:
        raise ProgramFailed(str(error)) from None
    flat: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, raw in config.items():
        value, replaced = _without_secure(raw)
        if replaced:
            secret_keys.append(str(key))
        try:
            flat[str(key)] = value if isinstance(value, str) else config_json(value)
        except StackYamlError as error:
            raise ProgramFailed(f"Pulumi.{stack}.yaml: {key}: {error}") from None
    notes = []
    if secret_keys:
        notes.append(
            f"Pulumi.{stack}.yaml: encrypted values of {', '.join(secret_keys)} cannot be "
            f"decrypted offline; each is the secret placeholder {SECRET_PLACEHOLDER!r}"
        )
    warnings = [f"Pulumi.{stack}.yaml: {line}" for line in cli_warnings(config)]
    return StackConfig(flat, secret_keys, notes, warnings)


def program_python(project_dir: Path, virtualenv: Path | None = None) -> tuple[str | None, str]:
    """The interpreter to run the program with (None: this one) and a note when it is not used.

    An explicit `virtualenv` must exist; the one Pulumi.yaml names is used when it
    exists, else this interpreter is, with a note saying so (the program may
    then miss packages, which is reported by name).
    """
    project_dir = Path(project_dir).resolve()
    declared = read_program(project_dir).virtualenv
    chosen = Path(virtualenv).resolve() if virtualenv is not None else declared
    if chosen is None:
        return None, ""
    python = chosen / "bin" / "python"
    if not python.is_file():
        if virtualenv is not None:
            raise ProgramFailed(f"{chosen}: not a virtualenv (no bin/python)")
        return None, (
            f"Pulumi.yaml names the virtualenv {chosen.name!r}, which does not exist; running "
            f"with {sys.executable}"
        )
    if python.absolute() == Path(sys.executable).absolute():
        return None, ""
    return str(python), ""
