"""Settings the provider or the platform would silently change are refused by `make plan`.

Each refusal is one line naming the key, before anything is deployed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scheduler_dedup.offline import gcp_mocks
from scheduler_dedup.offline.mockrun import run_program
from tests.clitools import run_module

STATIC = "time:index/static:Static"


def plan(project: Path):
    return run_module(
        "scheduler_dedup.offline.plan", "--dir", str(project), "--stack", "test", timeout_s=120
    )


def test_make_plan_refuses_max_doublings_0_which_the_provider_never_sends(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    multi_job_config["scheduler-dedup:jobs"][0]["retry"]["maxDoublings"] = 0

    result = plan(make_stack(multi_job_config))

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: scheduler-dedup:jobs[0].retry.maxDoublings: 0 ")
    assert "doubles 5 times" in result.stderr


def test_make_plan_sends_every_other_zero_retry_setting_as_given(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    # retryCount 0 is Scheduler's own default; zero durations are strings, which the
    # provider sends.
    multi_job_config["scheduler-dedup:jobs"][0]["retry"] = {
        "retryCount": 0,
        "maxRetryDuration": "0s",
        "maxDoublings": 1,
    }

    result = plan(make_stack(multi_job_config))

    assert result.returncode == 0, result.stderr
    assert "maxRetryDuration=0s, maxDoublings=1, " in result.stdout


@pytest.mark.parametrize("runtime", ["python37", "python38", "python310"])
def test_make_plan_refuses_a_runtime_older_than_python_3_11_naming_the_supported_ones(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any], runtime: str
) -> None:
    result = plan(make_stack({**multi_job_config, "scheduler-dedup:handlerRuntime": runtime}))

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: scheduler-dedup:handlerRuntime: {runtime!r} ")
    assert "use one of python311, python312, python313" in result.stderr


@pytest.mark.parametrize(
    ("key", "value"), [("projectHeader", "Content-Type"), ("regionHeader", "content-type")]
)
def test_make_plan_refuses_a_dedup_header_the_job_sets_itself(
    make_stack: Callable[[dict[str, Any]], Path],
    multi_job_config: dict[str, Any],
    key: str,
    value: str,
) -> None:
    result = plan(make_stack({**multi_job_config, f"scheduler-dedup:{key}": value}))

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: scheduler-dedup:{key}: {value!r} is a header ")


def source_object(stdout: str) -> str:
    (line,) = [line for line in stdout.splitlines() if "storageSource.object:" in line]
    return line.split(":", 1)[1].strip()


def test_make_plan_leaves_the_handlers_dotfiles_out_of_the_archive(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    project = make_stack(multi_job_config)
    before = plan(project)
    assert before.returncode == 0, before.stderr

    (project / "handler" / ".env").write_text("API_KEY=local-secret\n")
    (project / "handler" / ".venv" / "lib").mkdir(parents=True)
    (project / "handler" / ".venv" / "lib" / "site.py").write_text("")
    after = plan(project)

    # The archive's name is the hash of every file in it: unchanged, so neither went in.
    assert after.returncode == 0, after.stderr
    assert source_object(after.stdout) == source_object(before.stdout)


@pytest.mark.parametrize("line", ["runledger==0.4.0", "Scheduler_Dedup @ git+https://x/y.git"])
def test_make_plan_refuses_a_handler_requirement_that_would_shadow_the_machinery(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any], line: str
) -> None:
    project = make_stack(multi_job_config)
    (project / "handler" / "requirements.txt").write_text(f"functions-framework==3.10.2\n{line}\n")

    result = plan(project)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert f"requirements.txt: {line!r} would install a package that shadows" in result.stderr


def test_make_plan_reads_the_job_ids_with_the_handler_dir_last_on_the_path_as_the_function(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    # functions-framework appends the source directory to sys.path: an installed package
    # (PyYAML here) wins over a handler module of the same name, in the function and in
    # the plan's probe alike.
    project = make_stack(multi_job_config)
    handler = project / "handler"
    (handler / "yaml.py").write_text("raise ImportError('the handler dir came first')\n")
    ids = "[nightly-report, hourly-sync, invoice-export]"
    (handler / "jobs.py").write_text(
        f"import yaml\nJOBS = {{job: print for job in yaml.safe_load({ids!r})}}\n"
    )

    result = plan(project)

    assert result.returncode == 0, result.stderr


def test_make_plan_leaves_an_octet_stream_content_type_to_schedulers_default(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    # The provider drops exactly this value from what it reads back, so sending it
    # would show a diff on every `pulumi up`; Scheduler sends it by default anyway.
    multi_job_config["scheduler-dedup:jobs"][1]["contentType"] = "application/octet-stream"
    multi_job_config["scheduler-dedup:jobs"][2]["contentType"] = "text/plain"

    result = plan(make_stack(multi_job_config))

    assert result.returncode == 0, result.stderr
    headers = [line for line in result.stdout.splitlines() if "httpTarget.headers:" in line]
    assert sum("Content-Type=" not in line for line in headers) == 1
    assert any("Content-Type=text/plain" in line for line in headers)
    assert not any("octet-stream" in line for line in headers)


def test_custom_role_ids_are_kept_by_every_up_and_new_after_a_destroy(
    make_stack: Callable[[dict[str, Any]], Path],
    multi_job_config: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = make_stack(multi_job_config)

    def role_ids() -> dict[str, str]:
        found = run_program(project, "test").of_type("gcp:projects/iAMCustomRole:IAMCustomRole")
        return {role.name: role.inputs["roleId"] for role in found}

    first = role_ids()
    assert role_ids() == first  # the same state: the same ids, nothing replaced
    # A destroy removes each role's creation time with it; the next `up`, 20 days later
    # (while IAM still holds the deleted ids), creates it again at that time.
    created = gcp_mocks._COMPUTED[STATIC]

    def twenty_days_later(name: str, *rest: Any) -> tuple[str, dict]:
        stamp, outputs = created(name, *rest)
        return stamp, outputs | {"unix": outputs["unix"] + 20 * 86400}

    monkeypatch.setitem(gcp_mocks._COMPUTED, STATIC, twenty_days_later)
    again = role_ids()

    assert (
        sorted(again)
        == sorted(first)
        == [
            "dedup-ledger-role",
            "dedup-pause-log-role",
            "dedup-scheduler-read-role",
        ]
    )
    for name, role in again.items():
        assert role != first[name]
        stem = first[name].rsplit("_", 1)[0]
        assert role.startswith(stem + "_") and stem.startswith("dedup_")
        assert re.fullmatch(r"[a-z0-9_]{3,64}", role)  # IAM's role id alphabet and length
