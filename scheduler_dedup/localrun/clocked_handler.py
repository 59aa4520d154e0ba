"""The deployed entry point (`handler/main.py`) on the demo's clock, for demos that pin "now".

It serves `main.handle_scheduled_job` itself, with `main.APP` rebuilt from the
same environment and only its clock replaced by the demo's (`scheduler_dedup.localrun.demo_clock`),
so everything else a request meets is what `pulumi up` deploys. Never deployed:
a deployed handler always reads the real time.
"""

from __future__ import annotations

import os

import main

from runledger.service.app import App
from scheduler_dedup.localrun.demo_clock import clock_from_env

main.APP = App.from_env(os.environ, clock=clock_from_env())
handle_scheduled_job = main.handle_scheduled_job
