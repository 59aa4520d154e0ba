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

from dedup_schedule.config.model import ConfigError, ScheduleConfig
from runledger import facts

# Generous: importing a jobs module may import client libraries, on a loaded machine.
PROBE_TIMEOUT_S = 120
_MARKER = "dedup-job-ids:"
# Run in the child: import the module with the handler dir last on the path and
# print JOBS' keys after a marker, so whatever the module prints itself is ignored.
_PROBE = f"""
import importlib, json, sys
from collections.abc import Mapping
sys.path.append(sys.argv[1])
jobs = getattr(importlib.import_module(sys.argv[2]), "JOBS", None)
if not isinstance(jobs, Mapping):
    sys.exit(f"module {{sys.argv[2]!r}} has no JOBS mapping")
print({_MARKER!r} + json.dumps(sorted(str(job) for job in jobs)))
"""


def handler_job_ids(handler_dir: Path, module: str, setting: str) -> frozenset[str]:
    """The keys of `module.JOBS` in `handler_dir`; ConfigError naming `setting` if it won't load."""
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
    lines = [line for line in done.stdout.splitlines() if line.startswith(_MARKER)]
    if done.returncode != 0 or not lines:
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(
            f"{setting}: cannot read the job ids of {module}.py in {handler_dir} ({detail}); "
            "the program imports it in its own Python, so install the handler's "
            "requirements there too"
        )
    return frozenset(json.loads(lines[-1].removeprefix(_MARKER)))


def check_handler_jobs(config: ScheduleConfig, handler_dir: Path, key_prefix: str) -> None:
    """Every configured job is in the handler's JOBS, and the audit's reserved ids are not.

    key_prefix: the namespace of the stack's keys (`scheduler-dedup:`), for the messages.
    """
    if not handler_dir.is_dir():
        raise ConfigError(f"{key_prefix}handlerDir: {handler_dir} does not exist")
    module = facts.DEFAULT_JOBS_MODULE
    defined = handler_job_ids(handler_dir, module, f"{key_prefix}handlerDir")
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


def _listed(ids: Collection[str]) -> str:
    return ", ".join(repr(job) for job in sorted(ids)) or "no jobs"
