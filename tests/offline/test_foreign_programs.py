"""`make plan` and `make policy-check` on Pulumi programs that are not this template.

Each fixture under `programs/` is a small program of our own with one class of
problem found on public Google Cloud programs (pulumi/examples, pulumi/templates):
public or default-identity endpoints, outputs only known after an update,
failing programs, secrets, missing packages, and advice that must fit the setup.
The tools run in-process, as `python -m` would run them, unless the test is about
the process itself (virtualenvs, exit status through make).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from scheduler_dedup.offline import plan, policy_check
from scheduler_dedup.offline.mockrun import compute_default_account, mock_project_number

PROGRAMS = Path(__file__).resolve().parent / "programs"
REPO = Path(__file__).resolve().parents[2]


def check(program: str, *args: str) -> tuple[int, str]:
    """The policy check's exit status and report, as
    `python -m scheduler_dedup.offline.policy_check` gives them."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = policy_check.main(["--dir", str(PROGRAMS / program), "--stack", "dev", *args])
    return status, out.getvalue()


def violations(report: str) -> list[tuple[str, str]]:
    """(policy, resource name) of every violation in a report."""
    found = []
    for line in report.splitlines():
        if line.startswith("["):
            policy, urn = line.split("] ", 1)[1].split(": ", 1)
            found.append((policy, urn.rsplit("::", 1)[-1]))
    return sorted(found)


def test_public_v1_function_and_v1_service_fail_the_check() -> None:
    status, report = check("public_v1")
    assert status == 1
    assert violations(report) == [
        ("run-invoker-iam-enabled", "open-v1"),
        ("run-no-public-invoker", "hello-public"),
    ]
    assert "grant roles/cloudfunctions.invoker only to" in report


def test_default_identities_are_named() -> None:
    status, report = check("default_identity")
    assert status == 1
    assert violations(report) == [
        ("run-dedicated-service-account", "default-account"),
        ("run-dedicated-service-account", "no-account"),
    ]
    assert (
        "the App Engine default service account (PROJECT_ID@appspot.gserviceaccount.com)" in report
    )
    # get_default_service_account() is answered as the API does, so the account is named.
    assert compute_default_account("fixture-project") in report
    assert compute_default_account("fixture-project") == (
        f"{mock_project_number('fixture-project')}-compute@developer.gserviceaccount.com"
    )


def test_unknown_outputs_stay_unknown_and_the_program_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan.main(["--dir", str(PROGRAMS / "unknowns"), "--stack", "dev"]) == 0
    shown = capsys.readouterr().out
    # Not known before the update: the Redis host, another stack's output.
    assert "    redis: [unknown]" in shown
    assert "    vpc: [unknown]" in shown
    # Known computed outputs get realistic values.
    assert "    sqlSocket: /cloudsql/fixture-project:europe-west1:db-" in shown
    assert "    bucketUrl: gs://files-" in shown
    status, report = check("unknowns")
    assert status == 0 and "policy check passed" in report


@pytest.mark.parametrize("tool", ["plan", "policy-check"])
def test_a_failing_program_is_one_block_with_file_and_line(
    tool: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--dir", str(PROGRAMS / "failing"), "--stack", "dev"]
    status = plan.main(argv) if tool == "plan" else policy_check.main(argv)
    assert status == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        'error: the program failed: TypeError: can only concatenate str (not "int") to str',
        "  at naming.py:2: return name + 42  # the program's own bug: str + int",
    ]


def test_plan_never_prints_a_secret_and_names_replaced_stack_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan.main(["--dir", str(PROGRAMS / "secrets"), "--stack", "dev"]) == 0
    captured = capsys.readouterr()
    assert "offline-placeholder" not in captured.out
    assert "plain-token-value" not in captured.out
    # The nested block stays, with only the secret value hidden.
    containers = next(line for line in captured.out.splitlines() if "template.containers" in line)
    assert "value=prod" in containers and "name=DB_URL" in containers
    assert "value=[secret]" in containers
    assert "    token: [secret]" in captured.out
    assert "encrypted values of secrets:dbPassword cannot be decrypted offline" in captured.err


def test_advice_fits_pubsub_google_apis_and_the_role() -> None:
    _, report = check("advice")
    fired = violations(report)
    # No attempt_deadline asked of a Pub/Sub job, no OIDC asked of a Google API call.
    assert not [v for v in fired if v[0] in ("scheduler-attempt-deadline", "scheduler-oidc-token")]
    # roles/editor: one problem, one violation.
    assert [v for v in fired if v[1] == "runner-editor"] == [
        ("iam-no-primitive-roles", "runner-editor")
    ]
    sql = report.split("::runner-sql", 1)[1].split("\n[", 1)[0]
    assert "roles/cloudsql.client on the resource that needs it" in sql
    assert "datastore" not in sql


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"scheduler-attempt-deadlines": "advisory"}, "did you mean 'scheduler-attempt-deadline'?"),
        ({"scheduler-attempt-deadline": {"maxSecond": 60}}, "did you mean 'maxSeconds'?"),
    ],
)
def test_unknown_policy_or_property_in_config_is_exit_2_with_a_suggestion(
    tmp_path: Path, config: dict, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    argv = ["--dir", str(PROGRAMS / "advice"), "--stack", "dev", "--policy-pack-config", str(path)]
    assert policy_check.main(argv) == 2
    assert message in capsys.readouterr().err


def _virtualenv_with(path: Path, module: str, source: str) -> Path:
    """A real virtualenv holding `module` and, through a .pth file, this one's packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    site = next(path.glob("lib/python*/site-packages"))
    (site / "tools.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (site / f"{module}.py").write_text(source)
    return path


def test_missing_package_is_named_then_the_program_runs_in_its_virtualenv(tmp_path: Path) -> None:
    project = tmp_path / "project"
    subprocess.run(["cp", "-r", str(PROGRAMS / "missing_module"), str(project)], check=True)
    command = [
        sys.executable,
        "-m",
        "scheduler_dedup.offline.plan",
        "--dir",
        str(project),
        "--stack",
        "dev",
    ]

    missing = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    assert missing.returncode == 2
    assert "imports 'acme_naming', which is not installed" in missing.stderr
    assert "'acme-naming==1.2.0'" in missing.stderr
    assert "Traceback" not in missing.stderr

    # Pulumi.yaml names `venv`: once it exists, the program runs with its packages.
    _virtualenv_with(
        project / "venv", "acme_naming", "def bucket_name(n):\n    return 'acme-' + n\n"
    )
    ran = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr
    assert "name: acme-files" in ran.stdout


def test_exit_status_through_make(tmp_path: Path) -> None:
    """make exits 2 on any failing recipe; its message keeps the tool's own status."""

    def make(program: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["make", "-s", "policy-check", f"DIR={PROGRAMS / program}", "STACK=dev"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )

    violation, failure, passed = make("public_v1"), make("failing"), make("unknowns")
    assert passed.returncode == 0
    assert violation.returncode == 2 and "policy-check] Error 1" in violation.stderr
    assert failure.returncode == 2 and "policy-check] Error 2" in failure.stderr
