"""The house rules a newcomer relies on, checked on the source itself.

- No import loop among the modules of each deployable part (handler/, infra/,
  scheduler_dedup/, policies/): every import counts, at module level, inside a
  function or under TYPE_CHECKING, since each is a dependency a reader follows.
- The handler's modules import one way, down `LAYERS` (docs/architecture.md,
  "Layers"): a module imports its own layer and the layers below, never one
  above, and no two parts of a layer import each other both ways. Every import
  counts, as for loops. A module may be as long as its one idea needs.
- Each contract name (every DEDUP_* variable, every HTTP header the code
  names) is spelled as a string literal at most once outside the tests, so it
  has one home its readers and writers import. The policy pack ships without
  the handler and keeps its own copy (`PACK_COPIES`); that copy is held to the
  handler's names here.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from runledger import config, facts, schedules

ROOT = Path(__file__).resolve().parent.parent
# Each part, and the folder its top-level modules import from (a file's module
# name is its path below that folder).
PARTS = {
    "handler": ROOT / "handler",
    "infra": ROOT / "infra",
    "scheduler_dedup/offline": ROOT,
    "policies": ROOT / "policies",
}
# The policy pack's tested copies of the handler's contract: it installs with only
# the Pulumi SDKs, so it cannot import runledger (tests/test_shared_facts.py holds
# facts.py byte-identical; test_the_pack_reads_only_variables_the_handler_reads
# below holds the others to the handler's names).
PACK_COPIES = (
    "policies/dedup_policies/caller_rules.py",
    "policies/dedup_policies/facts.py",
    "policies/dedup_policies/handler_settings.py",
    "policies/dedup_policies/region_rules.py",
    "policies/dedup_policies/stack_rules.py",
)
DEDUP_NAME = re.compile(r"DEDUP_[A-Z0-9]+(?:_[A-Z0-9]+)*")
HEADER_NAME = re.compile(r"X-[A-Za-z0-9]+(?:-[A-Za-z0-9]+)+")


def _sources(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if not any(part.startswith(".") or part == "__pycache__" for part in parts):
            yield path


def _part_files(part: str) -> Iterator[Path]:
    folder = ROOT / part
    yield from _sources(folder)


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(tree: ast.AST, module: str, is_package: bool, modules: set[str]) -> Iterator[str]:
    """The modules of `modules` that `tree` imports, wherever the import statement stands.

    `from pkg import name` imports the module pkg.name if there is one, else pkg.
    """
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                base = node.module or ""
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    yield f"{base}.{alias.name}"
                elif base in modules:
                    yield base


def import_graph(part: str) -> dict[str, set[str]]:
    """Module -> the modules of the same part it imports."""
    base = PARTS[part]
    files = {_module_name(path, base): path for path in _part_files(part)}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        imported = _imported(tree, module, path.name == "__init__.py", set(files))
        graph[module] = set(imported) - {module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import loop as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder_reports_a_loop_and_passes_a_tree() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_a_from_import_of_a_module_counts_as_importing_that_module() -> None:
    graph = import_graph("handler")
    assert "runledger.facts" in graph["runledger.config"]  # `from runledger import facts`
    assert "runledger.service.app" in graph["main"]


@pytest.mark.parametrize("part", sorted(PARTS))
def test_no_import_loop(part: str) -> None:
    cycle = find_cycle(import_graph(part))
    assert cycle is None, f"{part}/ has an import loop: {' -> '.join(cycle or ())}"


# The handler's layers, bottom first (docs/architecture.md, "Layers"). Each names
# its parts: a package (and every module below it) or one module; a module is in
# the part that names it most closely. The package `runledger` itself, what a
# jobs module imports (`from runledger import Jobs`), is a part of its own: it
# names no module below it.
LAYERS = (
    (
        "keys",
        ("runledger.exceptions", "runledger.facts", "runledger.config", "runledger.schedules"),
    ),
    ("ledger", ("runledger.ledger",)),
    ("sdk", ("runledger", "runledger.sdk", "runledger.targets")),
    ("delivery", ("runledger.delivery",)),
    ("audit", ("runledger.audit",)),
    ("backfill", ("runledger.backfill",)),
    ("ops", ("runledger.ops",)),
    # What wires the layers together: the App that routes every request, the audit
    # as the job it serves (audit, catch-up, then the backfill pass), a job test's harness.
    ("composition", ("runledger.service", "runledger.testing")),
    # The deployed entry point and the team's jobs.
    ("entry", ("main", "jobs")),
)
ROOT_PACKAGE = "runledger"


def part_of(module: str) -> tuple[int, str, str] | None:
    """(layer index, layer name, part) of `module`, or None when no layer names it."""
    found: tuple[int, str, str] | None = None
    for index, (layer, parts) in enumerate(LAYERS):
        for part in parts:
            below = part != ROOT_PACKAGE and module.startswith(f"{part}.")
            if (module == part or below) and (found is None or len(part) > len(found[2])):
                found = (index, layer, part)
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import in `graph` of a module in a higher layer than the importer's, said plainly."""
    found = []
    for module in sorted(graph):
        importer = part_of(module)
        for target in sorted(graph[module]):
            imported = part_of(target)
            if importer and imported and imported[0] > importer[0]:
                found.append(
                    f"{module} (layer {importer[1]}) imports {target} (layer {imported[1]}),"
                    " a layer above it"
                )
    return found


def part_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Part -> the other parts its modules import."""
    parts: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        if (source := part_of(module)) is None:
            continue
        for target in targets:
            if (imported := part_of(target)) and imported[2] != source[2]:
                parts[source[2]].add(imported[2])
    return dict(parts)


def _graph_of(sources: dict[str, str]) -> dict[str, set[str]]:
    """The import graph of modules given as source text (none of them a package's `__init__`)."""
    return {
        module: set(_imported(ast.parse(text), module, False, set(sources))) - {module}
        for module, text in sources.items()
    }


def test_an_import_up_the_layers_is_refused_wherever_it_stands() -> None:
    graph = _graph_of(
        {
            "runledger.ledger.machine": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from runledger.ops.cli import main\n"
                "def f():\n    from runledger.delivery import identify\n"
                "from runledger import facts\n"
            ),
            "runledger.ops.cli": "",
            "runledger.delivery.identify": "from ..ledger import machine\n",
            "runledger.facts": "",
        }
    )
    assert upward_imports(graph) == [
        "runledger.ledger.machine (layer ledger) imports runledger.delivery.identify"
        " (layer delivery), a layer above it",
        "runledger.ledger.machine (layer ledger) imports runledger.ops.cli (layer ops),"
        " a layer above it",
    ]


def test_two_parts_of_one_layer_that_import_each_other_are_found() -> None:
    graph = _graph_of(
        {
            "runledger.sdk.context": "from runledger.targets import start\n",
            "runledger.sdk.registry": "",
            "runledger.targets": "from runledger.sdk import registry\n",
        }
    )
    assert upward_imports(graph) == []  # one layer: sdk
    assert find_cycle(graph) is None  # and no module loop
    assert find_cycle(part_graph(graph)) == ["runledger.sdk", "runledger.targets", "runledger.sdk"]


def test_a_module_is_in_the_part_that_names_it_most_closely() -> None:
    def named(module: str) -> tuple[str, str] | None:
        found = part_of(module)
        return None if found is None else found[1:]

    assert named("runledger.service.app") == ("composition", "runledger.service")
    assert named("runledger.delivery.identify") == ("delivery", "runledger.delivery")
    assert named("runledger") == ("sdk", "runledger")
    assert named("runledger.newpart") is None  # the package names no module below it


def test_every_handler_module_has_a_layer() -> None:
    unplaced = sorted(module for module in import_graph("handler") if part_of(module) is None)
    assert unplaced == [], f"handler modules in no layer (add them to LAYERS): {unplaced}"


def test_no_handler_import_goes_up_the_layers() -> None:
    found = upward_imports(import_graph("handler"))
    assert found == [], "imports up the layers:\n" + "\n".join(found)


def test_no_two_parts_of_the_handler_import_each_other() -> None:
    parts = part_graph(import_graph("handler"))
    assert parts["runledger.backfill"] >= {"runledger.audit", "runledger.delivery"}
    cycle = find_cycle(parts)
    assert cycle is None, f"parts that import each other: {' -> '.join(cycle or ())}"


def _literals(pattern: re.Pattern[str]) -> dict[str, list[str]]:
    """Each string literal of non-test code that is a name `pattern` matches, and where."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in _sources(ROOT):
        where = path.relative_to(ROOT).as_posix()
        if where.startswith("tests/") or where in PACK_COPIES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=where)):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and pattern.fullmatch(node.value)
            ):
                found[node.value.lower() if pattern is HEADER_NAME else node.value].append(
                    f"{where}:{node.lineno}"
                )
    return found


def test_every_dedup_variable_is_spelled_once_outside_the_tests() -> None:
    found = _literals(DEDUP_NAME)
    assert set(found) >= {config.LEASE_ENV, schedules.VARIABLE}  # the scan sees the readers
    assert {name: places for name, places in found.items() if len(places) > 1} == {}


def test_every_header_name_is_spelled_once_outside_the_tests() -> None:
    found = _literals(HEADER_NAME)
    named = {facts.JOB_HEADER, facts.SCHEDULE_HEADER}
    named |= {facts.DEFAULT_PROJECT_HEADER, facts.DEFAULT_REGION_HEADER}
    assert {name.lower() for name in named} <= set(found)
    assert {name: places for name, places in found.items() if len(places) > 1} == {}


def test_the_pack_reads_only_variables_the_handler_reads() -> None:
    handler = {
        value
        for name, value in vars(config).items()
        if name.endswith("_ENV") and isinstance(value, str)
    }
    handler |= {schedules.VARIABLE, schedules.LOOKBACK_VARIABLE, schedules.AUDIT_JOB_VARIABLE}
    pack: set[str] = set()
    for copy in PACK_COPIES:
        text = (ROOT / copy).read_text()
        pack |= set(DEDUP_NAME.findall(text))
    # stack_rules builds two families of names from their common stem.
    pack -= {"DEDUP_ALLOWED"}
    assert pack <= handler
