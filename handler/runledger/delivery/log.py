"""One structured line per request, in the JSON shape Cloud Logging parses.

Values are bounded so hostile headers cannot blow up a log line, and no
header or token is ever logged whole.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any, TextIO

_MAX_VALUE_CHARS = 300
# Requests run on concurrent threads; `print` writes a line and its newline as two
# writes, which two threads could interleave into one unparseable line.
_WRITE_LOCK = threading.Lock()


def _bounded(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _MAX_VALUE_CHARS:
        return value[:_MAX_VALUE_CHARS] + "..."
    return value


def log_line(severity: str, message: str, stream: TextIO | None = None, **fields: Any) -> None:
    entry = {"severity": severity, "message": _bounded(message)}
    entry.update({key: _bounded(value) for key, value in fields.items() if value is not None})
    line = json.dumps(entry, default=str) + "\n"
    out = stream or sys.stdout
    with _WRITE_LOCK:
        out.write(line)
        out.flush()
