"""The handler's source files and their content hash.

The hash goes into the storage object's name, so any change to the handler's code
or requirements gives a new object, which changes the function's build source and
makes `pulumi up` build and roll out a new revision. Unchanged code keeps the same
name, so repeated `pulumi up` runs are no-ops.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# Byte-code caches and editor/OS droppings differ between machines and must neither
# be uploaded nor change the hash.
_SKIPPED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
_SKIPPED_SUFFIXES = (".pyc", ".pyo", ".swp", "~")
_SKIPPED_NAMES = frozenset({".DS_Store"})


class HandlerSourceError(ValueError):
    """The handler directory is missing or does not look like a Cloud Run function."""


def handler_files(handler_dir: Path) -> dict[str, Path]:
    """Map archive path (POSIX, relative to `handler_dir`) to file, sorted, caches excluded."""
    root = Path(handler_dir)
    if not root.is_dir():
        raise HandlerSourceError(f"handler source directory {root} does not exist")
    files = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part in _SKIPPED_DIRS for part in relative.parts) or not path.is_file():
            continue
        if path.name in _SKIPPED_NAMES or path.name.endswith(_SKIPPED_SUFFIXES):
            continue
        files[relative.as_posix()] = path
    for required in ("main.py", "requirements.txt"):
        if required not in files:
            raise HandlerSourceError(f"handler source directory {root} has no {required}")
    return files


def source_digest(files: dict[str, Path]) -> str:
    """SHA-256 over every archive path and file content, independent of timestamps."""
    digest = hashlib.sha256()
    for name in sorted(files):
        data = files[name].read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()
