"""`python -m scheduler_dedup.offline.policy_check` end to end: the program mocked, the real pack.

Runs in a subprocess, as `make policy-check` does, on every stack of this repo
and on a copy of the template that a user has edited.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.clitools import run_module
from tests.stacks import FIXTURE_STACK, REPO_STACKS, machinery_project

REPO_ROOT = Path(__file__).resolve().parents[2]


def policy_check(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("scheduler_dedup.offline.policy_check", *args, timeout_s=240)


@pytest.fixture
def template(tmp_path: Path) -> Path:
    """A copy of the Pulumi project with the fixture stack, outside the repo."""
    return machinery_project(tmp_path)


def add_resource(template: Path, declaration: str) -> None:
    """Append one `pulumi_gcp` resource to the copied program, as a user editing it would."""
    program = template / "infra" / "__main__.py"
    program.write_text(program.read_text() + "\nimport pulumi_gcp as gcp\n" + declaration + "\n")


def public_invoker(member: str) -> str:
    """A grant letting `member` invoke the handler: what run-no-public-invoker must refuse."""
    return (
        "gcp.cloudrunv2.ServiceIamMember('wide-open', name='dedup-handler', "
        f"location='europe-west1', role='roles/run.invoker', member='{member}')"
    )


@pytest.mark.parametrize("stack", REPO_STACKS)
def test_every_stack_of_the_repo_passes(stack: str) -> None:
    result = policy_check("--dir", str(REPO_ROOT), "--stack", stack)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "policy check passed: 0 mandatory, 0 advisory" in result.stdout
    assert result.stderr == ""


def test_copied_template_with_a_public_invoker_fails(template: Path) -> None:
    add_resource(template, public_invoker("allUsers"))
    result = policy_check("--dir", str(template), "--stack", FIXTURE_STACK)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"[mandatory] run-no-public-invoker: urn:pulumi:{FIXTURE_STACK}::" in result.stdout
    assert "ServiceIamMember::wide-open" in result.stdout
    assert "allUsers is granted roles/run.invoker" in result.stdout
    assert "policy check FAILED: 1 mandatory" in result.stdout


def test_stack_with_its_own_header_names_passes(template: Path) -> None:
    # The pack takes the header names from what the stack declares (the handler's
    # DEDUP_PROJECT_HEADER, the jobs' headers), so this option needs no pack config.
    stack_file = template / "Pulumi.tenant.yaml"
    text = (template / f"Pulumi.{FIXTURE_STACK}.yaml").read_text()
    stack_file.write_text(text.rstrip() + "\n  scheduler-dedup:projectHeader: X-Proj\n")
    result = policy_check("--dir", str(template), "--stack", "tenant")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "policy check passed: 0 mandatory, 0 advisory" in result.stdout


def test_pack_config_changes_a_setting_of_a_copied_template(template: Path) -> None:
    config = template / "policy-config.json"
    config.write_text(json.dumps({"scheduler-attempt-deadline": {"maxSeconds": 60}}))
    failed = policy_check(
        "--dir", str(template), "--stack", FIXTURE_STACK, "--policy-pack-config", str(config)
    )
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "[mandatory] scheduler-attempt-deadline" in failed.stdout
    assert "set it between 15s and 60s" in failed.stdout


def test_advisory_only_exits_zero(template: Path) -> None:
    config = template / "policy-config.json"
    config.write_text(json.dumps({"all": "advisory"}))
    add_resource(
        template,
        "gcp.projects.IAMMember('viewer', project='p', role='roles/viewer', member='user:a@b')",
    )
    result = policy_check(
        "--dir", str(template), "--stack", FIXTURE_STACK, "--policy-pack-config", str(config)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[advisory] iam-no-primitive-roles" in result.stdout
    assert "policy check passed: 0 mandatory, 1 advisory" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--dir", "/nonexistent/project"), "has no Pulumi.yaml"),
        (("--stack", "no-such-stack"), "Pulumi.no-such-stack.yaml"),
        (("--policy-pack-config", "/nonexistent/config.json"), "cannot read policy config"),
        (("--policy-pack", "/tmp"), "is not a Python policy pack"),
        (("--bogus",), "unrecognized arguments"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: tuple[str, ...], message: str) -> None:
    result = policy_check(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0]


def test_broken_program_is_a_short_block_with_its_line_not_a_traceback(template: Path) -> None:
    program = template / "infra" / "__main__.py"
    program.write_text(program.read_text() + "\nraise RuntimeError('boom in the program')\n")
    lines = len(program.read_text().splitlines())
    result = policy_check("--dir", str(template), "--stack", FIXTURE_STACK)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: the program failed: RuntimeError: boom in the program",
        f"  at infra/__main__.py:{lines}: raise RuntimeError('boom in the program')",
    ]


@pytest.mark.parametrize("stack", REPO_STACKS)
def test_first_preview_of_every_stack_has_no_mandatory_violation(stack: str) -> None:
    result = policy_check("--dir", str(REPO_ROOT), "--stack", stack, "--preview")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "policy check passed: 0 mandatory" in result.stdout
    assert "can't run policy 'scheduler-oidc-audience'" in result.stdout
    assert "[mandatory]" not in result.stdout


def test_first_preview_still_catches_a_public_invoker(template: Path) -> None:
    add_resource(template, public_invoker("allAuthenticatedUsers"))
    result = policy_check("--dir", str(template), "--stack", FIXTURE_STACK, "--preview")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[mandatory] run-no-public-invoker" in result.stdout


def test_a_project_with_its_own_pack_uses_it(template: Path) -> None:
    pack = template / "policies"
    shutil.copytree(REPO_ROOT / "policies", pack, ignore=shutil.ignore_patterns("__pycache__"))
    module = pack / "dedup_policies" / "pack.py"
    module.write_text(
        module.read_text().replace('PACK_NAME = "gcp-scheduler-dedup"', 'PACK_NAME = "my-pack"')
    )
    result = policy_check("--dir", str(template), "--stack", FIXTURE_STACK)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"policy pack my-pack ({pack})")
