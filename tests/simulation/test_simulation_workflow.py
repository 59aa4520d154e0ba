"""The nightly simulation workflow: at least 10,000 seeds, and the replays as its artifact."""

from __future__ import annotations

from pathlib import Path

import yaml

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "simulation.yml"


def test_the_nightly_workflow_runs_ten_thousand_seeds_and_keeps_the_replays():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert triggers["schedule"][0]["cron"]
    job = workflow["jobs"]["seeds"]
    shards = job["strategy"]["matrix"]["shard"]
    assert shards == list(range(len(shards)))
    assert len(shards) * int(workflow["env"]["SEEDS_PER_SHARD"]) >= 10_000
    run = next(step["run"] for step in job["steps"] if "make simulate" in step.get("run", ""))
    assert "--seeds $SEEDS_PER_SHARD --first $first" in run
    assert "replay:" in run
    upload = next(step for step in job["steps"] if "upload-artifact" in step.get("uses", ""))
    assert upload["if"] == "failure()" and "replays.txt" in upload["with"]["path"]
