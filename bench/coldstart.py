"""Cold start: a fresh interpreter imports an entry point and answers its first delivery.

What a new Cloud Run instance pays before its first answer. Each sample is
its own process (`bench.coldstart_probe`) with the same environment,
PYTHONPATH layout and jobs module as the served process; one unmeasured
probe per side first warms the bytecode cache, as a deployed image has it.
`make bench` takes 20 a side in its repetitions; `make bench ARGS=--coldstart`
takes only these (`bench.runner.run_coldstart`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench import REPO_ROOT
from bench.schedule import ScheduleTimes, delivery_headers


@dataclass(frozen=True)
class ColdStartSample:
    import_s: float
    first_answer_s: float
    process_s: float
    status: int
    cpu_s: float  # the process's CPU time (user + system) up to its first answer


def probe(
    source: Path, target: str, env: Mapping[str, str], times: ScheduleTimes
) -> ColdStartSample:
    headers = json.dumps(dict(delivery_headers(times.next())))
    pythonpath = os.pathsep.join([str(source.parent), str(REPO_ROOT)])
    child_env = {**os.environ, **env, "PYTHONPATH": pythonpath}
    child_env.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    command = [sys.executable, "-m", "bench.coldstart_probe", str(source), target, headers]
    started = time.perf_counter()
    done = subprocess.run(
        command, env=child_env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    process_s = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"cold-start probe of {source} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return ColdStartSample(
        result["import_s"],
        result["first_answer_s"],
        process_s,
        int(result["status"]),
        result["cpu_s"],
    )
