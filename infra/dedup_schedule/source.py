"""The function's source archive: the team's handler files, the installed runledger, one hash.

Cloud Build installs only what the archive's `requirements.txt` names, from the
package index, so the archive carries the machinery itself: the `runledger`
package this program imports (its folder, `runledger.__file__`'s: the template's
`handler/runledger` under the editable install, site-packages in a team's copy)
beside the team's `main.py` and `jobs.py`. Its `requirements.txt` is runledger's
own (`runledger/requirements.txt`) followed by the team's, so a new machinery pin
brings its requirements along.

The hash covers every archive path and content and goes into the storage object's
name, so any change to the team's code, to runledger or to a requirement gives a
new object, which changes the function's build source and makes `pulumi up` build
and roll out a new revision. Unchanged sources keep the same name, so repeated
`pulumi up` runs are no-ops.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import runledger

# The installed machinery's package, archived whole under its import name.
LIBRARY = "runledger"
LIBRARY_DIR = Path(runledger.__file__).resolve().parent
REQUIREMENTS = "requirements.txt"
# Byte-code caches and editor/OS droppings differ between machines and must neither
# be uploaded nor change the hash. Dotfiles and dot-directories (`.env`, `.venv`,
# `.git`, tool caches, `.DS_Store`) are left out too: they hold local secrets and
# state, never code the function runs.
_SKIPPED_DIRS = frozenset({"__pycache__"})
_SKIPPED_SUFFIXES = (".pyc", ".pyo", ".swp", "~")
# Distributions a team's requirements may not name: functions-framework appends the
# source directory to the END of sys.path (`_function_registry.load_function_module`,
# `sys.path.append`), so an installed `runledger` (PyPI has an unrelated one) or this
# project's own distribution would be imported instead of the archived `runledger/`.
_MACHINERY = frozenset({"runledger", "scheduler-dedup"})
# A requirement line's project name (PEP 508), and the separators PEP 503 folds.
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_SEPARATORS = re.compile(r"[-_.]+")


class HandlerSourceError(ValueError):
    """The handler directory is missing or does not look like a Cloud Run function."""


@dataclass(frozen=True)
class HandlerArchive:
    """What the function is built from.

    files: archive path (POSIX) -> file on disk, the team's and runledger's.
    requirements: the archive's `requirements.txt`, composed (no file holds it).
    """

    files: dict[str, Path]
    requirements: str

    def digest(self) -> str:
        """SHA-256 over every archive path and content, independent of timestamps."""
        contents = {name: path.read_bytes() for name, path in self.files.items()}
        contents[REQUIREMENTS] = self.requirements.encode()
        digest = hashlib.sha256()
        for name in sorted(contents):
            digest.update(f"{name}\0{len(contents[name])}\0".encode())
            digest.update(contents[name])
        return digest.hexdigest()


def _tree(root: Path) -> dict[str, Path]:
    """Map path relative to `root` (POSIX) to file, sorted, caches and dotfiles excluded."""
    files = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part in _SKIPPED_DIRS or part.startswith(".") for part in relative.parts):
            continue
        if not path.is_file() or path.name.endswith(_SKIPPED_SUFFIXES):
            continue
        files[relative.as_posix()] = path
    return files


def handler_files(handler_dir: Path, library_dir: Path = LIBRARY_DIR) -> dict[str, Path]:
    """The team's files of `handler_dir`; its `runledger/` only if it is the installed one.

    In the template `handler/runledger` is the installed package (editable), archived
    once, as runledger's. Any other `runledger/` there would be deployed in place of
    the machinery this program was tested with, so it is refused.
    """
    root = Path(handler_dir)
    if not root.is_dir():
        raise HandlerSourceError(f"handler source directory {root} does not exist")
    own = root / LIBRARY
    if own.exists() and own.resolve() != library_dir.resolve():
        raise HandlerSourceError(
            f"{own} is not the installed {LIBRARY} ({library_dir}); the function's archive "
            f"takes {LIBRARY} from the installed package, so delete {own}"
        )
    files = {name: path for name, path in _tree(root).items() if name.split("/")[0] != LIBRARY}
    for required in ("main.py", REQUIREMENTS):
        if required not in files:
            raise HandlerSourceError(f"handler source directory {root} has no {required}")
    return files


def _requirement(raw: str) -> tuple[str, str] | None:
    """(canonical project name, the line without spaces) of a requirement line, else None.

    Comments, blank lines and pip options (`-r`, `--index-url`) name no project.
    """
    line = "".join(raw.split("#", 1)[0].split())
    match = _NAME.match(line)
    return None if match is None else (_canonical(match.group()), line)


def _canonical(name: str) -> str:
    return _SEPARATORS.sub("-", name).lower()


def compose_requirements(team_file: Path, library_text: str) -> str:
    """runledger's requirements, then the team's lines that runledger's do not already hold.

    A team line naming a package runledger pins is dropped when it says the same or
    names it alone, and refused when it says otherwise: pip would fail the build, or
    install a version runledger was not tested with.
    """
    ours = dict(filter(None, map(_requirement, library_text.splitlines())))
    kept = []
    for raw in team_file.read_text(encoding="utf-8").splitlines():
        name, line = _requirement(raw) or ("", "")
        if name in _MACHINERY:
            raise HandlerSourceError(
                f"{team_file}: {raw.strip()!r} would install a package that shadows the "
                f"archived {LIBRARY}/ (the function puts its source directory last on the "
                "import path); remove the line: the archive carries the machinery"
            )
        if name not in ours:
            kept.append(raw)
        elif line != ours[name] and _canonical(line) != name:
            raise HandlerSourceError(
                f"{team_file}: {raw.strip()!r} differs from {LIBRARY} "
                f"{runledger.__version__}'s {ours[name]!r} ({LIBRARY}/{REQUIREMENTS}); "
                "remove the line (the function installs runledger's) or make it the same"
            )
    return (
        f"# {LIBRARY}'s requirements ({LIBRARY}/{REQUIREMENTS}):\n"
        f"{library_text.rstrip()}\n"
        f"# The handler's own ({REQUIREMENTS} of the handler directory):\n"
        + "".join(f"{line}\n" for line in kept)
    )


def handler_archive(handler_dir: Path, library_dir: Path = LIBRARY_DIR) -> HandlerArchive:
    """The team's handler files and the installed runledger, with one requirements.txt."""
    team = handler_files(handler_dir, library_dir)
    library = {f"{LIBRARY}/{name}": path for name, path in _tree(library_dir).items()}
    if f"{LIBRARY}/{REQUIREMENTS}" not in library:
        raise HandlerSourceError(f"the installed {LIBRARY} ({library_dir}) has no {REQUIREMENTS}")
    library_text = library[f"{LIBRARY}/{REQUIREMENTS}"].read_text(encoding="utf-8")
    requirements = compose_requirements(team.pop(REQUIREMENTS), library_text)
    return HandlerArchive(files={**team, **library}, requirements=requirements)
