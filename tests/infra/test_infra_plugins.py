"""CI installs the provider plugins the program needs, at the versions the program pins.

pulumiverse_time's plugin comes from GitHub's API (its pulumi-plugin.json `server`),
which rate-limits anonymous calls, so the workflow installs it with a token before
`pulumi preview`; docs/deploy.md gives the same commands. A bumped pin without the
workflow (or the other way round) fails here.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

from tests.infra.test_infra_requirements import read_requirements

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "policy.yml"


def pins() -> dict[str, str]:
    sdk = REPO / "infra" / "requirements-sdk.txt"
    return read_requirements(sdk, cwd=sdk.parent)[0]


def workflow_env() -> dict[str, str]:
    text = WORKFLOW.read_text(encoding="utf-8")
    return dict(re.findall(r"^\s+([A-Z_]+_PLUGIN_[A-Z]+): \"?([^\"\n]+)\"?$", text, re.M))


def time_plugin_server() -> str:
    manifest = resources.files("pulumiverse_time").joinpath("pulumi-plugin.json")
    return json.loads(manifest.read_text(encoding="utf-8"))["server"]


def test_the_workflow_installs_the_pinned_plugins_before_the_preview() -> None:
    env = workflow_env()

    assert env["TIME_PLUGIN_VERSION"] == pins()["pulumiverse-time"]
    assert env["GCP_PLUGIN_VERSION"] == pins()["pulumi-gcp"]
    assert env["TIME_PLUGIN_SERVER"] == time_plugin_server()
    text = WORKFLOW.read_text(encoding="utf-8")
    install = text.index('pulumi plugin install resource time "$TIME_PLUGIN_VERSION"')
    assert install < text.index("command: preview")
    assert "GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}" in text[:install]


def test_the_deploy_guide_gives_the_same_commands() -> None:
    guide = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")

    time = pins()["pulumiverse-time"]
    assert f"pulumi plugin install resource time {time} --server {time_plugin_server()}" in guide
    assert f"pulumi plugin install resource gcp {pins()['pulumi-gcp']}" in guide
    assert f"resource-time-v{time}/" in guide
