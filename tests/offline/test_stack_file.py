"""The offline tools' one reader of Pulumi.yaml and Pulumi.<stack>.yaml, and the parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from dedup_schedule.config import ScheduleConfig
from dedup_schedule.config_reader import parse_config
from offline.stack_file import StackFileError, read_project_name, read_stack_values

REPO = Path(__file__).resolve().parents[2]


def load_stack_config(project_dir: Path, stack: str) -> ScheduleConfig:
    return parse_config(read_stack_values(project_dir, stack), read_project_name(project_dir))


def test_load_stack_config_reads_the_example_stack() -> None:
    # Whatever jobs a team puts in the stack: this holds for any valid one.
    config = load_stack_config(REPO, "example")

    ids = [job.id for job in config.jobs]
    assert ids and len(set(ids)) == len(ids)
    assert config.request_timeout_s >= max(job.attempt_deadline_s for job in config.jobs)


def test_load_stack_config_names_a_missing_stack_file(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: scheduler-dedup\nruntime: python\n")

    with pytest.raises(StackFileError, match=r"Pulumi\.nope\.yaml: cannot read"):
        load_stack_config(tmp_path, "nope")


def test_load_stack_config_follows_the_projects_stack_config_dir(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text(
        "name: renamed\nruntime: python\nstackConfigDir: stacks\n"
    )
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.dev.yaml").write_text(
        "config:\n  gcp:project: my-project-1\n  gcp:region: us-central1\n"
        "  renamed:jobs:\n    - id: j\n      schedule: 0 * * * *\n"
    )

    assert [job.id for job in load_stack_config(tmp_path, "dev").jobs] == ["j"]
