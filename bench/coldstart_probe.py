"""Child process of the cold-start benchmark: load one entry point, answer one delivery.

Run as `python -m bench.coldstart_probe SOURCE TARGET HEADERS_JSON` in a
fresh interpreter. It loads the entry point the way functions-framework does
(`create_app`, which imports the source module), sends one first delivery
through the Flask test client, and prints the timings as one JSON line.
The clock starts before anything but the standard library is imported.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import json  # noqa: E402 - after the clock starts, on purpose
import sys  # noqa: E402


def main(argv: list[str]) -> None:
    source, target, headers_json = argv
    from functions_framework import create_app

    app = create_app(target, source)
    imported = time.perf_counter()
    response = app.test_client().post("/", headers=json.loads(headers_json), data=b"")
    answered = time.perf_counter()
    result = {
        "import_s": imported - STARTED,
        "first_answer_s": answered - STARTED,
        # The process's CPU time by then, interpreter start included: what a shared
        # machine's load inflates far less than the wall clock.
        "cpu_s": time.process_time(),
        "status": response.status_code,
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
