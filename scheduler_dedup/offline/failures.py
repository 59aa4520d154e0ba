"""A failing program, said in one short block instead of a stack trace.

`ProgramFailed` is the one error a run under mocks raises: the stack files are
unreadable, the program stopped with a clean error (`pulumi.RunError`, e.g. a
config error, whose message is kept), or it raised. For the last case `failure`
names the exception, the program's own innermost line and the resource being
declared, and `missing_module` says which requirement to install and where.
"""

from __future__ import annotations

import contextlib
import re
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pulumi


class ProgramFailed(Exception):
    """The program (or its stack files) rejected the configuration; `str()` is the message."""


def _requirement_for(module: str, project_dir: Path) -> str | None:
    """The line of the program's requirements.txt that most likely provides `module`."""
    try:
        lines = (project_dir / "requirements.txt").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    wanted = re.sub(r"[-_.]+", "-", module.split(".")[0]).lower()
    for line in lines:
        name = re.split(r"[<>=!~;\[ ]", line.strip(), maxsplit=1)[0]
        if name and re.sub(r"[-_.]+", "-", name).lower() == wanted:
            return line.strip()
    return None


def missing_module(error: ModuleNotFoundError, project_dir: Path, python: str) -> str:
    """What to install, and where, for a module the program imports but `python` lacks."""
    module = error.name or str(error)
    requirement = _requirement_for(module, project_dir)
    package = requirement or re.sub(r"_+", "-", module.split(".")[0])
    return (
        f"the program imports {module!r}, which is not installed for {python}. Install the "
        f"program's requirements in its own virtualenv (python -m venv venv && venv/bin/pip "
        f"install -r requirements.txt; it needs {package!r}) and name it in Pulumi.yaml "
        "runtime.options.virtualenv or with --virtualenv DIR."
    )


def _resource_in_trace(trace: Any) -> str | None:
    """`type 'name'` of the resource being constructed where the error was raised, if any."""
    found = None
    while trace is not None:
        local = trace.tb_frame.f_locals
        candidate = local.get("__self__", local.get("self"))
        name = local.get("resource_name", local.get("name"))
        if isinstance(candidate, pulumi.Resource) and isinstance(name, str):
            cls = type(candidate)
            found = f"{cls.__module__.rsplit('.', 1)[0]}.{cls.__name__} {name!r}"
        trace = trace.tb_next
    return found


def _is_program_file(filename: str, project_dir: Path) -> bool:
    """A file of the program itself: under its directory, not an installed package."""
    path = Path(filename)
    return (
        path.is_absolute()
        and path.resolve().is_relative_to(project_dir)
        and "site-packages" not in path.parts
    )


@contextlib.contextmanager
def apply_tracebacks(seen: dict[int, Any]) -> Iterator[None]:
    """Keeps the traceback of an exception raised in an `apply` callback.

    The SDK re-raises such an exception from its own task queue with only its
    own frames, which would hide the program's line; `seen` maps the exception
    to the traceback it had when it left the callback.
    """
    original = pulumi.Output.apply

    def apply(self: pulumi.Output[Any], func: Any, run_with_unknowns: bool = False) -> Any:
        def traced(value: Any) -> Any:
            try:
                return func(value)
            except Exception as error:
                seen[id(error)] = error.__traceback__
                raise

        return original(self, traced, run_with_unknowns)

    pulumi.Output.apply = apply  # type: ignore[method-assign]
    try:
        yield
    finally:
        pulumi.Output.apply = original  # type: ignore[method-assign]


def failure(error: BaseException, project_dir: Path, seen: Mapping[int, Any]) -> str:
    """The error, the innermost line of the program it came from, and the resource, if known."""
    message = " ".join(str(error).split()) or type(error).__name__
    lines = [f"the program failed: {type(error).__name__}: {message}"]
    trace = seen.get(id(error), error.__traceback__)
    frames = [
        frame
        for frame in traceback.extract_tb(trace)
        if _is_program_file(frame.filename, project_dir)
    ]
    if frames:
        frame = frames[-1]
        where = Path(frame.filename).resolve().relative_to(project_dir)
        lines.append(f"  at {where}:{frame.lineno}: {(frame.line or '').strip()}")
    resource = _resource_in_trace(trace)
    if resource:
        lines.append(f"  while declaring {resource}")
    return "\n".join(lines)
