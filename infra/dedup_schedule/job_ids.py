"""Plan-time check that the handler being deployed defines every job the stack schedules.

A Scheduler job whose id the handler's `JOBS` lacks is refused (404) on every
delivery, and nothing says so until runs are missed; the deployed handler also
refuses to start when DEDUP_SCHEDULES names such a job. So `pulumi up` and
`make plan` fail first, naming the job.

The job ids come from importing the handler's jobs module the way the function
does (module `DEDUP_JOBS_MODULE`, `handlerDir` appended to the END of the import
path, as functions-framework's `load_function_module` does with `sys.path.append`;
`python -P` keeps the child's working directory off the path too, so an installed
package wins over a handler module of the same name in both), but in a
separate Python process: user code then never runs inside the Pulumi program, and
whatever it does at import time (clients, logging set-up, sys.path changes) stays
in that process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

from dedup_schedule.config.model import ConfigError, ScheduleConfig
from runledger import facts

# Generous: importing a jobs module may import client libraries, on a loaded machine.
PROBE_TIMEOUT_S = 120
_MARKER = "dedup-job-ids:"
_FAILED = "dedup-job-ids-failed:"
# Run in the child: import the module with the handler dir last on the path and
# print JOBS' keys after a marker, so whatever the module prints itself is ignored.
# An import that fails prints where and why after another marker: the file and line
# of the error (a syntax error's own; else the deepest frame in the handler dir).
_PROBE = f"""
import importlib, json, os, sys, traceback
from collections.abc import Mapping
sys.path.append(sys.argv[1])
try:
    jobs = getattr(importlib.import_module(sys.argv[2]), "JOBS", None)
except BaseException as exc:
    if isinstance(exc, SyntaxError):
        where, error = (exc.filename, exc.lineno), f"{{type(exc).__name__}}: {{exc.msg}}"
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        inside = [f for f in frames if f.filename.startswith(os.path.join(sys.argv[1], ""))]
        frame = (inside or frames or [None])[-1]
        where = (frame.filename, frame.lineno) if frame else (None, None)
        error = f"{{type(exc).__name__}}: {{exc}}"
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    failure = dict(file=where[0], line=where[1], error=error, missing=missing)
    print({_FAILED!r} + json.dumps(failure))
    sys.exit(1)
if not isinstance(jobs, Mapping):
    sys.exit(f"module {{sys.argv[2]!r}} has no JOBS mapping")
print({_MARKER!r} + json.dumps(sorted(str(job) for job in jobs)))
"""


def handler_job_ids(
    handler_dir: Path, module: str, setting: str, shown_dir: str | None = None
) -> frozenset[str]:
    """The keys of `module.JOBS` in `handler_dir`; ConfigError naming `setting` if it won't load.

    `shown_dir`: how the error names `handler_dir` (the stack's `handlerDir`, such as
    `handler`), so a syntax error reads `handler/jobs.py:12: SyntaxError: ...`.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-P", "-c", _PROBE, str(handler_dir), module],
            cwd=handler_dir,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"{setting}: importing {module}.py from {handler_dir} took over {PROBE_TIMEOUT_S}s"
        ) from None
    failed = [line for line in done.stdout.splitlines() if line.startswith(_FAILED)]
    if failed:
        failure = json.loads(failed[-1].removeprefix(_FAILED))
        raise ConfigError(f"{setting}: {_import_failure(failure, handler_dir, module, shown_dir)}")
    lines = [line for line in done.stdout.splitlines() if line.startswith(_MARKER)]
    if done.returncode != 0 or not lines:
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(
            f"{setting}: cannot read the job ids of {module}.py in {handler_dir} ({detail})"
        )
    return frozenset(json.loads(lines[-1].removeprefix(_MARKER)))


def _import_failure(
    failure: dict[str, Any], handler_dir: Path, module: str, shown_dir: str | None
) -> str:
    """Where importing the jobs module failed and why; the requirements advice only for
    a module that is not installed (not for one of the handler's own files)."""
    file, line, error = failure["file"], failure["line"], failure["error"]
    base = shown_dir if shown_dir is not None else str(handler_dir)
    where = f"{base}/{module.replace('.', '/')}.py"
    if file:
        path, root = Path(file).resolve(), handler_dir.resolve()
        inside = path.is_relative_to(root)
        where = f"{base}/{path.relative_to(root).as_posix()}" if inside else file
        where += f":{line}" if line else ""
    missing = failure["missing"]
    if missing is None:
        return f"{where}: {error}"
    if missing.split(".")[0] == module.split(".")[0]:
        return f"no {module.replace('.', '/')}.py in {base} ({error})"
    return (
        f"{where}: {error}; the program imports {module}.py in its own Python, so install "
        "the handler's requirements there too"
    )


def check_handler_jobs(config: ScheduleConfig, handler_dir: Path, key_prefix: str) -> list[str]:
    """Every configured job is in the handler's JOBS, and the audit's reserved ids are not.

    key_prefix: the namespace of the stack's keys (`scheduler-dedup:`), for the messages.
    Returns the ids JOBS defines that no job of the stack schedules: they never run.
    """
    if not handler_dir.is_dir():
        raise ConfigError(f"{key_prefix}handlerDir: {handler_dir} does not exist")
    module = facts.DEFAULT_JOBS_MODULE
    defined = handler_job_ids(handler_dir, module, f"{key_prefix}handlerDir", config.handler_dir)
    where = f"{config.handler_dir}/{module}.py"
    clash = sorted(config.reserved_job_ids & defined)
    if clash:
        raise ConfigError(
            f"{key_prefix}handlerDir: {where} defines {clash[0]!r}, the job id "
            "reserved for the audit; the handler would refuse to start, so rename that job"
        )
    for index, job in enumerate(config.jobs):
        if job.id not in defined:
            raise ConfigError(
                f"{key_prefix}jobs[{index}].id: {job.id!r} is not defined in {where} "
                f"(JOBS has {_listed(defined)}); every delivery of it would be refused with 404"
            )
    return sorted(defined - {job.id for job in config.jobs})


def _listed(ids: Collection[str]) -> str:
    return ", ".join(repr(job) for job in sorted(ids)) or "no jobs"
