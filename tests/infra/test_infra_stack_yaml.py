"""`make plan` reads a stack file's ambiguous scalars as the Pulumi CLI does.

The CLI decodes Pulumi.<stack>.yaml with gopkg.in/yaml.v3 (resolve.go) and holds a
top-level config value as pulumi's config.Value does (sdk/go/common/resource/config/
object.go MarshalString); PyYAML's YAML 1.1 reading differs for yes/no/on/off,
dates, octal-looking and exponent numbers and duplicate keys. Each case is one plan
of a stack file written as text (`scheduler_dedup.offline.stack_yaml` holds the rules and their
sources). A misspelt provider key in the same file gets a "did you mean" warning.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clitools import run_module

HEAD = """config:
  gcp:project: dedup-test-project
  gcp:region: europe-west3
"""


def plan(project: Path, text: str):
    (project / "Pulumi.test.yaml").write_text(HEAD + text, encoding="utf-8")
    return run_module(
        "scheduler_dedup.offline.plan", "--dir", str(project), "--stack", "test", timeout_s=120
    )


def job(**fields: str) -> str:
    lines = "".join(f"      {key}: {value}\n" for key, value in fields.items())
    return (
        f"  scheduler-dedup:jobs:\n    - id: nightly-report\n      schedule: '0 3 * * *'\n{lines}"
    )


def test_yes_is_a_string_so_paused_yes_is_refused(project_copy: Path) -> None:
    # yaml.v3 resolve.go: "yes" is not a bool (PyYAML's 1.1 rules make it true).
    result = plan(project_copy, job(paused="yes"))

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "scheduler-dedup:jobs[0].paused: 'yes' is not true or false" in result.stderr


def test_true_in_capitals_is_a_bool(project_copy: Path) -> None:
    # yaml.v3 resolve.go: True and TRUE are bools.
    result = plan(project_copy, job(paused="TRUE"))

    assert result.returncode == 0, result.stderr
    assert '"paused":true' in result.stdout


def test_an_unquoted_date_in_a_job_reaches_the_program_as_go_time_text(project_copy: Path) -> None:
    # yaml.v3 resolve.go parseTimestamp -> time.Time; pulumi config/object.go unmarshalObject:
    # v.String(). The plan shows the body `pulumi up` would send, and warns naming each key.
    result = plan(project_copy, job(description="2026-12-01", body="2026-12-01"))

    assert result.returncode == 0, result.stderr
    assert '"body":"2026-12-01 00:00:00 +0000 UTC"' in result.stdout
    warnings = [line for line in result.stderr.splitlines() if "unquoted date" in line]
    assert warnings == [
        f"warning: Pulumi.test.yaml: scheduler-dedup:jobs[0].{key}: the unquoted date "
        "2026-12-01 reaches the program as '2026-12-01 00:00:00 +0000 UTC' (the Pulumi CLI "
        "reads it as a time); quote it to keep the text"
        for key in ("description", "body")
    ]


def test_a_quoted_date_is_sent_as_written(project_copy: Path) -> None:
    # yaml.v3 decode.go scalar(): a quoted scalar is a string.
    result = plan(project_copy, job(body="'2026-12-01'"))

    assert result.returncode == 0, result.stderr
    assert '"body":"2026-12-01"' in result.stdout
    assert "unquoted date" not in result.stderr


def test_octal_and_exponent_numbers_in_an_object(project_copy: Path) -> None:
    # yaml.v3 resolve.go: ParseInt base 0 reads 0o3 as 3 (a string to PyYAML); yamlStyleFloat
    # reads 1.5e2 as 150.0 (a string to PyYAML), which the load round trip makes 150.
    result = plan(project_copy, job(attemptDeadline="1.5e2", retry="{retryCount: 0o3}"))

    assert result.returncode == 0, result.stderr
    assert "attemptDeadline: 150s" in result.stdout
    assert "retryCount=3}" in result.stdout


def test_a_top_level_number_reaches_the_program_as_its_json_text(project_copy: Path) -> None:
    # pulumi config/object.go MarshalString: 0x10 resolves to 16 and is held as "16".
    result = plan(project_copy, job() + "  scheduler-dedup:maxInstances: 0x10\n")

    assert result.returncode == 0, result.stderr
    assert "serviceConfig.maxInstanceCount: 16" in result.stdout


def test_null_top_level_is_empty_so_the_default_applies_with_the_cli_warning(
    project_copy: Path,
) -> None:
    # yaml.v3 decode.go prepare(): a null node never reaches config.Value: "" (loaders.go
    # checkForEmptyConfig warns of it).
    result = plan(project_copy, job() + "  scheduler-dedup:maxInstances: ~\n")

    assert result.returncode == 0, result.stderr
    assert (
        "warning: Pulumi.test.yaml: scheduler-dedup:maxInstances: no value; the Pulumi CLI "
        'treats it as the empty string and warns (write "" to say so)'
    ) in result.stderr.splitlines()


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("  gcp:region: europe-west1\n" + job(), "config.gcp:region"),
        (job(schedule="'5 * * * *'"), "config.scheduler-dedup:jobs[0].schedule"),
    ],
)
def test_a_duplicate_key_is_refused_in_one_line(project_copy: Path, text: str, key: str) -> None:
    # yaml.v3 decode.go: "mapping key ... already defined at line N".
    result = plan(project_copy, text)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert f"mapping key {key!r} already defined at line" in result.stderr


def test_a_misspelt_provider_key_gets_a_did_you_mean_warning(project_copy: Path) -> None:
    # The provider ignores keys it does not read (pulumi_gcp/config/vars.py lists those it does).
    result = plan(project_copy, job() + "  gcp:regoin: europe-west1\n  gcp:zone: europe-west3-a\n")

    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: gcp:")]
    assert warnings == [
        "warning: gcp:regoin: not a key of the gcp provider, which ignores it; "
        "did you mean 'region'?"
    ]


@pytest.mark.parametrize(
    ("platform", "expected"),
    [
        (
            "  gcp:regoin: europe-west1\n",
            "error: gcp:region: required, expected a Google Cloud region; the stack sets "
            "'gcp:regoin': did you mean 'gcp:region'?",
        ),
        (
            "  gcp:region: europe-west99\n",
            "error: gcp:region: 'europe-west99' is not a Google Cloud region that Firestore "
            "offers (nearest: europe-west9, ",
        ),
    ],
    ids=["misspelt-key", "no-such-region"],
)
def test_a_wrong_region_is_named_as_the_team_wrote_it(
    project_copy: Path, platform: str, expected: str
) -> None:
    (project_copy / "Pulumi.test.yaml").write_text(
        "config:\n  gcp:project: dedup-test-project\n" + platform + job(), encoding="utf-8"
    )
    result = run_module(
        "scheduler_dedup.offline.plan", "--dir", str(project_copy), "--stack", "test", timeout_s=120
    )

    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if not line.startswith("warning: ")]
    assert len(errors) == 1 and errors[0].startswith(expected), result.stderr
