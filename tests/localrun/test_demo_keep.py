"""`make demo ARGS=--keep`: the ledger stays up for `make ops`, and `make demo-stop` ends it all.

Run through make, as a user types it, with the state in a temporary directory
($DEMO_KEEP_DIR), so a demo a developer keeps running is not touched.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from scheduler_dedup.localrun.demo_keep import read_state
from tests.localrun.demo_project import DEMO_PROJECT, DEMO_STACK

REPO = Path(__file__).resolve().parents[2]
MISSED = re.compile(r"^  missed\s+(\S+)@(\S+)\s", re.MULTILINE)


def _make(*args: str, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _exports(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, value = shlex.split(line.removeprefix("export "))[0].split("=", 1)
        values[name] = value
    return values


@pytest.mark.firestore
@pytest.mark.timeout(600)
def test_kept_demo_serves_make_ops_and_the_stop_command_leaves_nothing(
    firestore_emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (firestore_emulator only makes the test skip loudly where there is no emulator.)
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("FIRESTORE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT")
        and not k.startswith("DEDUP_")
    }
    base["DEMO_KEEP_DIR"] = str(tmp_path)
    monkeypatch.setenv("DEMO_KEEP_DIR", str(tmp_path))  # where read_state looks
    args = f"--keep --runs 2 --dir {DEMO_PROJECT} --stack {DEMO_STACK}"
    demo = _make("demo", f"ARGS={args}", env=base, timeout_s=400)
    state = read_state()
    try:
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr
        assert state is not None and all(_alive(p.pgid) for p in state.processes)
        out = demo.stdout
        assert "export FIRESTORE_EMULATOR_HOST=" in out and "export DEDUP_DATABASE=" in out
        assert "curl -i -X POST http://127.0.0.1:" in out and "X-CloudScheduler-JobName: " in out
        assert out.strip().splitlines()[-1].startswith("verdict: exactly once HOLDS")

        env = {**base, **_exports(tmp_path / "demo.env")}
        audit = _make("ops", "ARGS=audit --json", env=env, timeout_s=120)
        findings = json.loads(audit.stdout.splitlines()[-1])
        assert isinstance(findings, list), audit.stdout
        # The run the simulator never delivered is in the kept ledger's audit, as missed.
        missed = {(job, when) for job, when in MISSED.findall(out)}
        assert missed, out
        reported = {(f["job"], f["schedule_time"]) for f in findings if f["finding"] == "missed"}
        assert missed <= reported, (missed, findings)
        listing = _make("ops", "ARGS=list --json", env=env, timeout_s=120)
        assert listing.returncode == 0, listing.stderr
        assert json.loads(listing.stdout.splitlines()[-1]), "the kept ledger has the demo's runs"
    finally:
        stopped = _make("demo-stop", env=base, timeout_s=120)
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped the kept demo's Firestore emulator and handler" in stopped.stdout
    assert state is not None and not any(_alive(p.pgid) for p in state.processes)
    assert not Path(state.workdir).exists()
    assert list(tmp_path.iterdir()) == []
