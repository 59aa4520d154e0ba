"""The Python snippets in README.md and docs/work.md are copy-paste ready.

Each is a complete `handler/jobs.py`: lint-clean under the project's ruff
settings, importable, and registering job ids no other snippet uses, so a
reader can paste any of them, or several, and deploy. A snippet whose first line
is `# tests/test_jobs.py` is the test of the jobs snippet before it: lint-clean,
and green under pytest with that snippet as its `jobs` module, as in a copy.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/work.md")
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
TEST_SNIPPET = "# tests/test_jobs.py\n"


def _snippets() -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """The jobs snippets (name, code), and the job tests (name, code, their jobs' code)."""
    jobs, tests = [], []
    for doc in DOCS:
        text = (REPO_ROOT / doc).read_text(encoding="utf-8")
        for number, match in enumerate(_BLOCK.finditer(text), start=1):
            code = match.group(1)
            if code.startswith(TEST_SNIPPET):
                tests.append((f"{doc}#{number}", code, jobs[-1][1]))
            else:
                jobs.append((f"{doc}#{number}", code))
    return jobs, tests


SNIPPETS, TEST_SNIPPETS = _snippets()


def _ruff_clean(name: str, path: Path) -> None:
    config = str(REPO_ROOT / "pyproject.toml")
    for check in (["check"], ["format", "--check", "--diff"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *check, "--no-cache", "--config", config, str(path)],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert result.returncode == 0, f"{name}: ruff {check[0]}\n{result.stdout}{result.stderr}"


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
    _ruff_clean(name, path)
    assert _job_ids(name, path), f"{name} registers no job"


def test_the_docs_show_a_job_test():
    assert TEST_SNIPPETS


@pytest.mark.parametrize(
    ("name", "code", "jobs"), TEST_SNIPPETS, ids=[name for name, _, _ in TEST_SNIPPETS]
)
def test_a_job_test_snippet_passes_against_the_jobs_before_it(
    name: str, code: str, jobs: str, tmp_path: Path
) -> None:
    (tmp_path / "handler").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "handler" / "jobs.py").write_text(jobs, encoding="utf-8")
    test = tmp_path / "tests" / "test_jobs.py"
    test.write_text(code, encoding="utf-8")
    _ruff_clean(name, test)
    # As a copy's `make test-jobs` runs it: handler/ on the path, the package installed.
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "handler")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{name}\n{done.stdout[-3000:]}{done.stderr[-2000:]}"


def test_snippets_use_distinct_job_ids(tmp_path: Path) -> None:
    seen: dict[str, str] = {}
    for number, (name, code) in enumerate(SNIPPETS):
        path = tmp_path / f"snippet_{number}.py"
        path.write_text(code, encoding="utf-8")
        for job_id in _job_ids(name, path):
            assert job_id not in seen, f"{name} reuses {job_id!r} from {seen.get(job_id)}"
            seen[job_id] = name
