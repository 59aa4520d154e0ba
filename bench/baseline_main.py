"""functions-framework entry point for the baseline, served like `handler/main.py`.

`scheduler_dedup.localrun.handler_server.start_handler(env, source=<this file>,
target="handle_baseline")` runs it under the same server, threads and
emulator as the handler, so the HTTP numbers differ only by the ledger.
"""

from __future__ import annotations

import os

import flask
import functions_framework

from bench.baseline import BaselineApp

APP = BaselineApp.from_env(os.environ)


@functions_framework.http
def handle_baseline(request: flask.Request) -> tuple[str, int]:
    return APP.handle(request.headers.items(), request.get_data())
