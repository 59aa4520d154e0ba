"""The offline tools' one reader of Pulumi.yaml and Pulumi.<stack>.yaml, and the parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from dedup_schedule.config.model import ScheduleConfig
from dedup_schedule.config.parser import parse_config
from scheduler_dedup.offline.stack_file import (
    StackFileError,
    choose_stack,
    read_project_name,
    read_stack_values,
)
from tests.stacks import REPO_STACKS

REPO = Path(__file__).resolve().parents[2]


def load_stack_config(project_dir: Path, stack: str) -> ScheduleConfig:
    return parse_config(read_stack_values(project_dir, stack), read_project_name(project_dir))


@pytest.mark.parametrize("stack", REPO_STACKS)
def test_load_stack_config_reads_every_stack_of_the_repo(stack: str) -> None:
    # Whatever jobs a team puts in the stack: this holds for any valid one.
    config = load_stack_config(REPO, stack)

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


def test_without_a_name_the_only_stack_is_chosen_and_several_are_listed(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: scheduler-dedup\nruntime: python\n")
    with pytest.raises(StackFileError, match=r"no Pulumi\.<stack>\.yaml here"):
        choose_stack(tmp_path, None)
    (tmp_path / "Pulumi.dev.yaml").write_text("config: {}\n")
    assert choose_stack(tmp_path, None) == "dev"
    (tmp_path / "Pulumi.prod.yaml").write_text("config: {}\n")
    with pytest.raises(StackFileError, match=r"several stacks in .* \(dev, prod\): name one"):
        choose_stack(tmp_path, None)
    assert choose_stack(tmp_path, "prod") == "prod"
