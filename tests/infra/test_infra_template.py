"""The project as a template, the offline plan, and reuse of the component elsewhere."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dedup_schedule.config.model import ConfigError
from dedup_schedule.config.parser import PROJECT_KEYS, parse_config
from scheduler_dedup.offline.mockrun import run_program
from scheduler_dedup.offline.stack_file import read_project_name
from tests.clitools import run_module
from tests.stacks import REPO_STACKS, repo_stack_file

REPO = Path(__file__).resolve().parents[2]


def template_config() -> dict[str, dict[str, Any]]:
    document = yaml.safe_load((REPO / "Pulumi.yaml").read_text(encoding="utf-8"))
    return document["template"]["config"]


def render_template(project_dir: Path, stack: str, answers: dict[str, str]) -> None:
    """Write the stack file `pulumi new` would: every template value, as a string."""
    project = yaml.safe_load((project_dir / "Pulumi.yaml").read_text(encoding="utf-8"))["name"]
    config = {}
    for key, spec in template_config().items():
        value = answers.get(key, spec.get("default"))
        if value is not None:
            config[key if ":" in key else f"{project}:{key}"] = str(value)
    document = {"config": config}
    (project_dir / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")


def test_project_file_keeps_the_shared_contract() -> None:
    document = yaml.safe_load((REPO / "Pulumi.yaml").read_text(encoding="utf-8"))

    assert document["name"] == "scheduler-dedup"
    assert document["runtime"] == {
        "name": "python",
        "options": {"toolchain": "pip", "virtualenv": ".venv"},
    }
    assert document["main"] == "infra/"


def test_template_documents_every_config_key_with_a_default() -> None:
    config = template_config()

    assert set(config) == PROJECT_KEYS | {"gcp:project", "gcp:region"}
    for key, spec in config.items():
        assert spec.get("description"), key
        if key != "gcp:project":
            assert "default" in spec, key


def test_the_template_describes_every_job_key_the_parser_accepts() -> None:
    # The parser names every key it accepts when it refuses an unknown one.
    job = {"id": "a", "schedule": "0 3 * * *", "zzz": 1}
    config = {"gcp:project": "dedup-test-project", "gcp:region": "europe-west1"}
    with pytest.raises(ConfigError, match=r"known keys: ") as refused:
        parse_config({**config, "scheduler-dedup:jobs": [job]})
    accepted = set(str(refused.value).split("known keys: ")[1].rstrip(")").split(", "))

    # Each job key is described in the template as `key (what it takes...)`.
    described = set(re.findall(r"\b([a-z][A-Za-z]*) \(", template_config()["jobs"]["description"]))
    assert accepted == described
    assert {"paused", "overlap"} <= described


def test_the_rendered_template_runs(project_copy: Path) -> None:
    render_template(project_copy, "dev", {"gcp:project": "fresh-project-42"})

    resources = run_program(project_copy, "dev")

    assert resources.stack_outputs["jobNames"] == ["nightly-report", "dedup-audit"]
    assert resources.stack_outputs["serviceUrl"].endswith(".us-central1.run.app")
    (function,) = resources.of_type("gcp:cloudfunctionsv2/function:Function")
    env = function.inputs["serviceConfig"]["environmentVariables"]
    assert env["DEDUP_ALLOWED_PROJECTS"] == "fresh-project-42"
    assert env["DEDUP_DATABASE"] == "(default)"


def test_a_renamed_and_edited_copy_runs_its_own_code(project_copy: Path) -> None:
    project_file = project_copy / "Pulumi.yaml"
    project_file.write_text(
        project_file.read_text().replace("name: scheduler-dedup", "name: team-schedules"),
        encoding="utf-8",
    )
    handler_service = project_copy / "infra" / "dedup_schedule" / "handler_service.py"
    handler_service.write_text(
        handler_service.read_text().replace(
            "Runs each scheduled job once per scheduled time.", "Edited in the copy."
        ),
        encoding="utf-8",
    )
    render_template(project_copy, "dev", {"gcp:project": "team-project-7", "namePrefix": "team"})

    resources = run_program(project_copy, "dev")

    (function,) = resources.of_type("gcp:cloudfunctionsv2/function:Function")
    assert function.inputs["description"] == "Edited in the copy."
    assert function.inputs["name"] == "team-handler"
    assert function.urn.startswith("urn:pulumi:dev::team-schedules::")


def test_the_component_can_be_reused_by_another_program(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: platform\nruntime: python\n", encoding="utf-8")
    handler = tmp_path / "handler"
    handler.mkdir()
    (handler / "main.py").write_text("def handle_scheduled_job(request): ...\n")
    (handler / "requirements.txt").write_text("functions-framework\n")
    (tmp_path / "Pulumi.prod.yaml").write_text("config: {}\n", encoding="utf-8")
    (tmp_path / "__main__.py").write_text(
        f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(REPO / "infra")!r})
from dedup_schedule.component import DedupSchedule, DedupScheduleArgs
from dedup_schedule.config.parser import parse_config

for prefix in ("billing", "reports"):
    config = parse_config({{
        "gcp:project": "platform-prod",
        "gcp:region": "us-east1",
        "scheduler-dedup:namePrefix": prefix,
        "scheduler-dedup:jobs": [{{"id": prefix + "-job", "schedule": "0 3 * * *"}}],
    }})
    DedupSchedule(prefix, DedupScheduleArgs(config=config, handler_dir=Path("handler")))
""",
        encoding="utf-8",
    )

    resources = run_program(tmp_path, "prod")

    components = resources.of_type("scheduler-dedup:index:DedupSchedule")
    assert sorted(c.name for c in components) == ["billing", "reports"]
    for component in components:
        owned = {component.urn}
        for resource in resources:  # parents register before their children
            if resource.parent in owned:
                owned.add(resource.urn)
        descendants = [r for r in resources if r.urn in owned - {component.urn}]
        assert len(descendants) > 20
        assert all(r.name.startswith(f"{component.name}-") for r in descendants)
    assert len({r.urn for r in resources}) == len(resources)


def run_plan(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("scheduler_dedup.offline.plan", *args, timeout_s=120)


def test_plan_prints_resources_settings_and_outputs(
    make_stack: Callable[[dict[str, Any]], Path], multi_job_config: dict[str, Any]
) -> None:
    project = make_stack(multi_job_config)

    result = run_plan("--dir", str(project), "--stack", "test")

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "+ gcp:cloudfunctionsv2/function:Function  dedup-handler" in out
    assert "+ gcp:cloudscheduler/job:Job  dedup-job-hourly-sync" in out
    assert "schedule: */15 * * * 1-5" in out
    assert "serviceConfig.timeoutSeconds: 600" in out
    assert "role: roles/run.invoker" in out
    assert "Outputs:" in out
    assert "gcloud scheduler jobs run nightly-report --location=europe-west3" in out


@pytest.mark.parametrize("stack_name", REPO_STACKS)
def test_plan_of_every_stack_of_the_repo(stack_name: str) -> None:
    result = run_plan("--dir", str(REPO), "--stack", stack_name)

    assert result.returncode == 0, result.stderr
    stack = yaml.safe_load(repo_stack_file(stack_name).read_text(encoding="utf-8"))
    for job in stack["config"][f"{read_project_name(REPO)}:jobs"]:
        assert f"+ gcp:cloudscheduler/job:Job  dedup-job-{job['id']}" in result.stdout


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {
                "gcp:project": "dedup-test-project",
                "gcp:region": "europe-west3",
                "scheduler-dedup:jobs": [{"id": "a", "schedule": "every 5 minutes"}],
            },
            "error: scheduler-dedup:jobs[0].schedule: 'every 5 minutes' is groc syntax",
        ),
        (
            {"gcp:region": "europe-west3", "scheduler-dedup:jobs": []},
            "error: gcp:project: required",
        ),
        (
            {
                "gcp:project": "dedup-test-project",
                "gcp:region": "europe-west3",
                "scheduler-dedup:jobs": [
                    {"id": "a", "schedule": "0 9 * * *"},
                    {"id": "june-31", "schedule": "0 9 31 6 *"},
                ],
            },
            "error: scheduler-dedup:jobs[1].schedule: '0 9 31 6 *' can never fire",
        ),
        (
            {
                "gcp:project": "dedup-test-project",
                "gcp:region": "europe-west3",
                "scheduler-dedup:jobs": [{"id": "a", "schedule": "0 0 */2 * 1"}],
            },
            "error: scheduler-dedup:jobs[0].schedule: '0 0 */2 * 1' is ambiguous",
        ),
    ],
)
def test_plan_reports_a_config_error_in_one_line(
    make_stack: Callable[[dict[str, Any]], Path], config: dict[str, Any], message: str
) -> None:
    result = run_plan("--dir", str(make_stack(config)), "--stack", "test")

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(message)


def test_plan_reports_a_missing_stack_file(project_copy: Path) -> None:
    result = run_plan("--dir", str(project_copy), "--stack", "nope")

    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "Pulumi.nope.yaml: cannot read" in result.stderr
