"""Run a Pulumi Python project under Pulumi's mocks and capture what it would register.

No Pulumi CLI, provider plugin or cloud credentials are involved: the project's
real program runs in-process against a mock resource monitor, exactly as
`pulumi up` would run it, and every resource registration is recorded in the form
the engine and CrossGuard policies see it (wire form: camelCase property names,
numbers as floats, plus parent, dependencies and provider).

Public API (shared with the policy pack's offline checker; keep it stable):

    run_program(project_dir, stack) -> ProgramResources
        A list of CapturedResource, the root stack first, with `.stack_outputs`.
    CapturedResource
        type, name, urn, id, custom, inputs, outputs, parent, dependencies,
        property_dependencies, provider, protect, aliases.
    ProgramFailed
        The program stopped cleanly with a message (config errors, pulumi.RunError).

The runner knows nothing about this repository's infrastructure code: it reads
`Pulumi.yaml` (project name, `main`, `stackConfigDir`) and `Pulumi.<stack>.yaml`
(`scheduler_dedup.offline.program_config`), passes the stack config through PULUMI_CONFIG as the
Python language host does, and runs `main`. It therefore works on any copy of the
template and on other Pulumi Python programs for Google Cloud. The mocks
(`scheduler_dedup.offline.gcp_mocks`) fill the computed outputs Google Cloud would return for the
types they know; every other computed output is unknown, as in `pulumi preview`:
the program runs as a preview (dry run), so `apply` callbacks on an unknown value
are skipped instead of receiving None. Recorded values keep what the engine knows
about them (`scheduler_dedup.offline.captured`); a failing program is summed up in one short
block (`scheduler_dedup.offline.failures`).

A program with its own virtualenv (Pulumi.yaml `runtime.options.virtualenv`, or
`virtualenv=`) runs in a subprocess with that environment's interpreter and
packages (`python -m scheduler_dedup.offline.mockrun`), which sends back the wire form.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import runpy
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import rpc
from pulumi.runtime.settings import get_root_resource, reset_options

from scheduler_dedup.offline.captured import (
    STACK_TYPE,
    UNKNOWN,
    CapturedResource,
    ProgramResources,
    Secret,
    Unknown,
    program_resources,
    reveal,
    wire_json,
)
from scheduler_dedup.offline.event_loops import close_leftover_loops
from scheduler_dedup.offline.failures import (
    ProgramFailed,
    apply_tracebacks,
    failure,
    missing_module,
)
from scheduler_dedup.offline.gcp_mocks import GcpMocks, compute_default_account, mock_project_number
from scheduler_dedup.offline.monitor import CapturingMonitor
from scheduler_dedup.offline.program_config import (
    SECRET_PLACEHOLDER,
    Project,
    StackConfig,
    program_python,
    read_program,
    stack_config,
)

# The public API, importable from here as it always was.
__all__ = [
    "SECRET_PLACEHOLDER",
    "STACK_TYPE",
    "UNKNOWN",
    "CapturedResource",
    "ProgramFailed",
    "ProgramResources",
    "Secret",
    "Unknown",
    "compute_default_account",
    "mock_project_number",
    "program_python",
    "reveal",
    "run_program",
]

# Where `scheduler_dedup` is imported from (the template's root, or the site-packages
# of the venv it is installed in), for a program Python that lacks it.
TOOLS_PARENT = Path(__file__).resolve().parents[2]


def _local_module_names(workdir: Path) -> set[str]:
    """Top-level modules and packages the program directory provides."""
    names = set()
    for path in workdir.iterdir():
        if path.suffix == ".py":
            names.add(path.stem)
        elif (path / "__init__.py").is_file():
            names.add(path.name)
    names.discard("__main__")
    return names


@contextlib.contextmanager
def _program_environment(config: StackConfig, workdir: Path, project_dir: Path) -> Iterator[None]:
    """PULUMI_CONFIG and cwd as the language host sets them, and the program's own imports.

    A module already imported under a name the program directory also provides
    (e.g. `dedup_schedule` from another copy of the template) is set aside for the
    run, so the program imports its own code; the program's modules are unloaded
    afterwards and the set-aside ones restored. Libraries (pulumi_gcp, ...) stay
    loaded: they may register themselves with the Pulumi runtime only once.
    """
    saved_env = {key: os.environ.get(key) for key in ("PULUMI_CONFIG", "PULUMI_CONFIG_SECRET_KEYS")}
    saved_cwd = Path.cwd()
    saved_path = list(sys.path)
    local = _local_module_names(workdir)
    shadowed = {name: module for name, module in sys.modules.items() if name.split(".")[0] in local}
    for name in shadowed:
        del sys.modules[name]
    before = set(sys.modules)
    os.environ["PULUMI_CONFIG"] = json.dumps(config.values)
    os.environ["PULUMI_CONFIG_SECRET_KEYS"] = json.dumps(config.secret_keys)
    pulumi.runtime.set_all_config({})
    os.chdir(workdir)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for name in set(sys.modules) - before:
            module_file = getattr(sys.modules[name], "__file__", None)
            if module_file and Path(module_file).resolve().is_relative_to(project_dir):
                del sys.modules[name]
        sys.modules.update(shadowed)


class _ProgramWarnings(logging.Handler):
    """What the program logs with `pulumi.log.warn`, which `pulumi up` shows as warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _program_logger(warnings: _ProgramWarnings) -> logging.Logger:
    logger = logging.getLogger("scheduler_dedup.offline.mockrun.program")
    logger.propagate = False
    logger.handlers = [warnings]
    return logger


async def _wire_outputs(values: Mapping[str, Any]) -> dict[str, Any]:
    return wire_json(await rpc.serialize_properties(dict(values), {}))


def _run_here(project: Project, project_dir: Path, stack: str) -> dict[str, Any]:
    """Runs the program in this interpreter; the result in wire form (see `program_resources`)."""
    config = stack_config(project_dir, stack)
    mocks = GcpMocks(config.values.get("gcp:project"), config.values.get("gcp:region"))
    monitor = CapturingMonitor(mocks)
    stack_outputs: dict[str, Any] = {}
    workdir = project.program if project.program.is_dir() else project.program.parent
    seen: dict[int, Any] = {}
    warnings = _ProgramWarnings()

    with _program_environment(config, workdir, project_dir), apply_tracebacks(seen):
        # A preview (dry run): outputs the mocks do not fill are unknown, as the engine has them.
        reset_options(project=project.name, stack=stack, preview=True)
        pulumi.runtime.set_mocks(
            mocks,
            project=project.name,
            stack=stack,
            preview=True,
            logger=_program_logger(warnings),
            monitor=monitor,
        )
        sys.path.insert(0, str(workdir))

        @pulumi.runtime.test
        def execute() -> Any:
            runpy.run_path(str(project.program), run_name="__main__")
            exported = dict(getattr(get_root_resource(), "outputs", {}))

            async def collect() -> None:
                stack_outputs.update(await _wire_outputs(exported))

            return asyncio.ensure_future(collect())

        try:
            execute()
        except pulumi.RunError as error:
            raise ProgramFailed(str(error)) from None
        except ModuleNotFoundError as error:
            raise ProgramFailed(missing_module(error, project_dir, sys.executable)) from None
        except (Exception, SystemExit) as error:
            raise ProgramFailed(failure(error, project_dir, seen)) from None

    notes = list(config.notes)
    if mocks.unanswered:
        notes.append(
            "data sources the offline run cannot answer (their results are empty): "
            + ", ".join(mocks.unanswered)
        )
    return {
        "records": monitor.records,
        "outputs": stack_outputs,
        "notes": notes,
        "warnings": config.warnings + warnings.lines,
    }


def _run_elsewhere(python: str, project_dir: Path, stack: str) -> dict[str, Any]:
    """Runs `python -m scheduler_dedup.offline.mockrun` in the program's environment; its result."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "result.json"
        environment = {**os.environ, "PYTHONPATH": str(TOOLS_PARENT)}
        command = [
            python,
            "-m",
            "scheduler_dedup.offline.mockrun",
            str(project_dir),
            stack,
            str(out),
        ]
        completed = subprocess.run(command, env=environment, check=False)
        if not out.is_file():
            raise ProgramFailed(
                f"{python} could not run the program (exit {completed.returncode}); it needs "
                "the pulumi and pyyaml packages"
            )
        document = json.loads(out.read_text(encoding="utf-8"))
    if "failed" in document:
        raise ProgramFailed(document["failed"])
    return document


def run_program(project_dir: Path, stack: str, virtualenv: Path | None = None) -> ProgramResources:
    """Run the Pulumi project in `project_dir` for `stack` under mocks; return what it registered.

    Runs in the program's own virtualenv when there is one (`program_python`).
    Raises ProgramFailed when the stack files are unreadable or the program
    stops: a clean error (`pulumi.RunError`, e.g. a config error) keeps its
    message; any other exception is reported with where it happened.
    """
    project_dir = Path(project_dir).resolve()
    project = read_program(project_dir)
    python, note = program_python(project_dir, virtualenv)
    if python is None:
        wire = _run_here(project, project_dir, stack)
    else:
        wire = _run_elsewhere(python, project_dir, stack)
    result = program_resources(wire)
    if note:
        result.notes.insert(0, note)
    return result


def _main(argv: list[str]) -> int:
    """`python -m scheduler_dedup.offline.mockrun DIR STACK OUT.json`, in the program's Python."""
    project_dir, stack, out = Path(argv[0]).resolve(), argv[1], Path(argv[2])
    try:
        document = _run_here(read_program(project_dir), project_dir, stack)
    except ProgramFailed as failed:
        document = {"failed": str(failed)}
    out.write_text(json.dumps(document), encoding="utf-8")
    close_leftover_loops()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
