"""The README and the docs hold together: every link lands, the map matches the tree.

A reader follows links from the README into docs/ and from an alert into the
runbook; a renamed heading or a moved module would leave them at a dead end.
Each check is a plain function over text, so the tests at the bottom show each
one failing on a broken example as well as passing on the real docs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS = (REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")))
RUNBOOK = REPO_ROOT / "docs" / "runbook.md"
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"
# The packages whose every module the architecture's module map names.
MAPPED_DIRS = ("handler", "infra", "scheduler_dedup", "policies", "bench")
# The README's first screen: what a newcomer sees before scrolling.
FIRST_SCREEN_LINES = 60
# A module list names modules; a first screen may mention one or two in passing.
FIRST_SCREEN_MODULE_MENTIONS = 2
# Where the first screen's "I want to..." links must lead.
FIRST_SCREEN_TARGETS = (
    "docs/work.md",
    "docs/deploy.md",
    "docs/runbook.md",
    "docs/policies.md",
    "docs/architecture.md",
)
# The runbook sections the alert policies' documentation links to (one per alert
# policy, one per audit finding); the anchors are fixed, other tools link to them.
RUNBOOK_ANCHORS = (
    "alert-scheduled-run-failed-for-good",
    "alert-scheduled-run-missed",
    "alert-run-ledger-unavailable",
    "alert-run-audit-stopped",
    "finding-missed",
    "finding-stale",
    "finding-failed",
    "finding-released",
    "finding-drifted",
    "finding-unauditable",
)

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.DOTALL | re.MULTILINE)
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)
_RUNBOOK_REF = re.compile(r"docs/runbook\.md#([A-Za-z0-9_-]+)")
_MODULE_MENTION = re.compile(r"[\w/.-]+\.py\b|\brunledger\.[a-z_]+")
_MAP_PATH = re.compile(r"`([\w./-]+(?:\.py|/))`")


def _prose(text: str) -> str:
    """The text without fenced code blocks: a `#` or `](` in code is not Markdown."""
    return _FENCE.sub("", text)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation dropped, spaces as '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a Markdown text, repeated headings numbered as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for match in _HEADING.finditer(_prose(text)):
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(text: str) -> list[str]:
    """The targets of the inline links in a Markdown text, outside code."""
    return _LINK.findall(_INLINE_CODE.sub("", _prose(text)))


def broken_links(doc: Path, text: str, root: Path = REPO_ROOT) -> list[str]:
    """Each relative link of `doc` whose file is missing or whose `#anchor` no heading has."""
    problems = []
    for target in links(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path_part, _, anchor = target.partition("#")
        if not path_part:
            if anchor not in anchors(text):
                problems.append(f"{target}: no heading #{anchor} in {doc.name}")
            continue
        path = (doc.parent / path_part).resolve()
        if not path.is_relative_to(root.resolve()) or not path.exists():
            problems.append(f"{target}: no file {path_part}")
            continue
        if (
            anchor
            and path.suffix == ".md"
            and anchor not in anchors(path.read_text(encoding="utf-8"))
        ):
            problems.append(f"{target}: no heading #{anchor} in {path.name}")
    return problems


def first_screen_problems(text: str) -> list[str]:
    """What keeps the README's first screen from being about the user."""
    screen = "\n".join(text.splitlines()[:FIRST_SCREEN_LINES])
    problems = []
    mentions = _MODULE_MENTION.findall(screen)
    if len(mentions) > FIRST_SCREEN_MODULE_MENTIONS:
        problems.append(f"names {len(mentions)} modules (a module list): {', '.join(mentions)}")
    targets = {target.partition("#")[0] for target in links(screen)}
    problems.extend(f"no link to {doc}" for doc in FIRST_SCREEN_TARGETS if doc not in targets)
    return problems


def missing_runbook_sections(files: Iterable[Path], runbook: str) -> dict[str, list[str]]:
    """Each `docs/runbook.md#anchor` the files name that no runbook heading has, with its files."""
    have = anchors(runbook)
    missing: dict[str, list[str]] = {}
    for path in files:
        for anchor in _RUNBOOK_REF.findall(path.read_text(encoding="utf-8")):
            if anchor not in have:
                missing.setdefault(anchor, []).append(path.name)
    return missing


def module_map(text: str) -> set[str]:
    """The paths the `## Module map` section of the architecture page names."""
    section = re.search(r"^## Module map\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE)
    return set(_MAP_PATH.findall(section.group(1))) if section else set()


def map_problems(named: set[str], root: Path, dirs: Iterable[str]) -> list[str]:
    """Paths the map names that are not in the tree, and modules of the tree it leaves out."""
    problems = [f"{path}: not in the tree" for path in sorted(named) if not (root / path).exists()]
    for directory in dirs:
        for module in sorted((root / directory).rglob("*.py")):
            relative = module.relative_to(root).as_posix()
            if module.name != "__init__.py" and relative not in named:
                problems.append(f"{relative}: missing from the module map")
    return problems


# --- the real docs ------------------------------------------------------------------------


@pytest.mark.parametrize("doc", DOCS, ids=[doc.relative_to(REPO_ROOT).as_posix() for doc in DOCS])
def test_every_relative_link_resolves(doc: Path) -> None:
    assert broken_links(doc, doc.read_text(encoding="utf-8")) == []


def test_the_readme_first_screen_is_for_the_user() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert first_screen_problems(readme) == []


def test_the_readme_first_screen_shows_how_a_team_makes_its_copy() -> None:
    screen = (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert any(line.startswith("copier copy ") for line in screen[:FIRST_SCREEN_LINES])


def test_what_the_readme_says_of_pulumi_new_is_what_deploy_md_backs() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    deploy = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    mentions = [line for line in readme.splitlines() if "pulumi new" in line]
    assert mentions and all("#why-copier-not-pulumi-new" in line for line in mentions)
    section = deploy.split("### Why copier, not `pulumi new`", 1)[1].split("\n#", 1)[0]
    assert "upgrade path" in section and "copier update" in section
    assert "does not support `pulumi new`" in section


def test_the_runbook_has_a_section_per_alert_and_finding() -> None:
    assert set(RUNBOOK_ANCHORS) - anchors(RUNBOOK.read_text(encoding="utf-8")) == set()


def test_every_runbook_link_in_the_code_resolves() -> None:
    code = [
        path
        for directory in ("infra", "handler")
        for path in sorted((REPO_ROOT / directory).rglob("*.py"))
    ]
    assert missing_runbook_sections(code, RUNBOOK.read_text(encoding="utf-8")) == {}


def test_the_module_map_matches_the_tree() -> None:
    named = module_map(ARCHITECTURE.read_text(encoding="utf-8"))
    assert named, "docs/architecture.md has no `## Module map` section naming modules"
    assert map_problems(named, REPO_ROOT, MAPPED_DIRS) == []


# --- each check fails on a broken example -------------------------------------------------


def test_github_slugs_match_the_links_the_docs_use() -> None:
    assert github_slug("Operator CLI: `python -m runledger.ops`") == (
        "operator-cli-python--m-runledgerops"
    )
    assert github_slug("Alert: Scheduled run failed for good") == (
        "alert-scheduled-run-failed-for-good"
    )
    assert github_slug("Each job's live state: paused, edited, unreadable") == (
        "each-jobs-live-state-paused-edited-unreadable"
    )
    assert anchors("# A\n## A\n```sh\n# not a heading\n```\n") == {"a", "a-1"}


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other\n## Real heading\n", encoding="utf-8")
    doc = tmp_path / "README.md"
    text = (
        "[ok](docs/other.md#real-heading) [self](#top) [web](https://example.com)\n"
        "# Top\n"
        "[gone](docs/missing.md) [bad anchor](docs/other.md#no-such-heading) [up](#bottom)\n"
        "`[code](docs/missing.md)`\n```\n[fenced](docs/missing.md)\n```\n"
    )
    assert broken_links(doc, text, tmp_path) == [
        "docs/missing.md: no file docs/missing.md",
        "docs/other.md#no-such-heading: no heading #no-such-heading in other.md",
        "#bottom: no heading #bottom in README.md",
    ]


def test_a_module_list_on_the_first_screen_is_reported() -> None:
    links_line = " ".join(f"[x]({doc})" for doc in FIRST_SCREEN_TARGETS)
    assert first_screen_problems(f"# Tool\n{links_line}\n") == []
    listing = "`app.py`, `ledger.py` and `runledger.audit`"
    assert first_screen_problems(f"# Tool\n{listing}\n{links_line}\n") == [
        "names 3 modules (a module list): app.py, ledger.py, runledger.audit"
    ]
    below = "\n" * FIRST_SCREEN_LINES + listing
    assert first_screen_problems(f"# Tool\n{links_line}{below}") == []
    assert first_screen_problems("# Tool\n[x](docs/work.md)\n")[0] == "no link to docs/deploy.md"


def test_a_runbook_link_to_a_missing_section_is_reported(tmp_path: Path) -> None:
    code = tmp_path / "alerts.py"
    code.write_text(
        'DOC = "docs/runbook.md#alert-run-audit-stopped"\n'
        'OTHER = "see docs/runbook.md#alert-no-such-alert"\n',
        encoding="utf-8",
    )
    runbook = "# Runbook\n## Alert: Run audit stopped\n"
    assert missing_runbook_sections([code], runbook) == {"alert-no-such-alert": ["alerts.py"]}


def test_a_module_map_out_of_step_with_the_tree_is_reported(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    for name in ("pkg/__init__.py", "pkg/a.py", "pkg/sub/b.py"):
        (tmp_path / name).write_text("", encoding="utf-8")
    text = "## Module map\n| `pkg/a.py` | a |\n| `pkg/gone.py` | moved |\n## Next\n`pkg/sub/b.py`\n"
    named = module_map(text)
    assert named == {"pkg/a.py", "pkg/gone.py"}
    assert map_problems(named, tmp_path, ["pkg"]) == [
        "pkg/gone.py: not in the tree",
        "pkg/sub/b.py: missing from the module map",
    ]
