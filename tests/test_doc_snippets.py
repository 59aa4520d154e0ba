"""The Python snippets in README.md and docs/work.md are copy-paste ready.

Each is a complete `handler/jobs.py`: lint-clean under the project's ruff
settings, importable, and registering job ids no other snippet uses, so a
reader can paste any of them, or several, and deploy.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/work.md")
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _snippets() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        text = (REPO_ROOT / doc).read_text(encoding="utf-8")
        for number, match in enumerate(_BLOCK.finditer(text), start=1):
            found.append((f"{doc}#{number}", match.group(1)))
    return found


SNIPPETS = _snippets()


def _job_ids(name: str, path: Path) -> set[str]:
    spec = importlib.util.spec_from_file_location(f"snippet_{abs(hash(name))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return set(module.JOBS)


def test_the_docs_have_snippets_to_check():
    assert len(SNIPPETS) >= 3


@pytest.mark.parametrize(("name", "code"), SNIPPETS, ids=[name for name, _ in SNIPPETS])
def test_snippet_is_a_lint_clean_jobs_module(name: str, code: str, tmp_path: Path) -> None:
    path = tmp_path / "jobs.py"
    path.write_text(code, encoding="utf-8")
    config = str(REPO_ROOT / "pyproject.toml")
    for check in (["check"], ["format", "--check", "--diff"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *check, "--no-cache", "--config", config, str(path)],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert result.returncode == 0, f"{name}: ruff {check[0]}\n{result.stdout}{result.stderr}"
    assert _job_ids(name, path), f"{name} registers no job"


def test_snippets_use_distinct_job_ids(tmp_path: Path) -> None:
    seen: dict[str, str] = {}
    for number, (name, code) in enumerate(SNIPPETS):
        path = tmp_path / f"snippet_{number}.py"
        path.write_text(code, encoding="utf-8")
        for job_id in _job_ids(name, path):
            assert job_id not in seen, f"{name} reuses {job_id!r} from {seen.get(job_id)}"
            seen[job_id] = name
