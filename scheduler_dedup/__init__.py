"""The tools that come with the machinery: the offline plan and policy check, and the demo.

`scheduler_dedup.offline` runs the Pulumi program and the policy pack under mocks
(`make plan`, `make policy-check`); `scheduler_dedup.localrun` runs a stack's schedule on
this machine (`make demo`, `make simulate`). Both work the same from the template and
from a team's copy, which installs them with the `scheduler-dedup` distribution.
"""
