"""Waiting for IAM grants to take effect before anything relies on them.

IAM is eventually consistent: a grant made in this `pulumi up` "typically" takes
effect within 2 minutes, "potentially 7 minutes or longer" (Google Cloud IAM docs,
"Access change propagation"). Two things in the first `up` rely on grants made in
the same `up`, and neither may meet a grant that has not arrived yet:

* the function build runs as the build account, right after its grants; a build
  that is refused fails the `up`, which would then need a re-run;
* the Scheduler jobs' first deliveries need the invoker's `run.invoker` (else
  Cloud Run answers 403 and a job without retries loses the run) and the runtime
  account's proxy-target grants.

Nothing in Google's APIs reports when a grant has propagated, so the stack waits
a fixed time after the grants with `pulumiverse_time.Sleep` (the Pulumi package of
the `time` provider; it waits on create only). Its `triggers` are the grants' ids:
a later `up` that adds or replaces a grant waits again, an `up` that changes none
does not wait at all.

The wait is `IAM_PROPAGATION_WAIT`, Google's typical time. A grant slower than
that is still harmless for deliveries: the handler releases a run that meets
`PermissionDenied` (non-2xx) and Cloud Scheduler's retry runs it later.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumiverse_time as time

from dedup_schedule.placement import Placement

IAM_PROPAGATION_WAIT = "120s"


def wait_for_grants(
    parent: pulumi.Resource, placement: Placement, suffix: str, grants: Sequence[pulumi.Resource]
) -> time.Sleep:
    """A `Sleep` of `IAM_PROPAGATION_WAIT` that starts once every grant in `grants` exists.

    Whatever depends on the returned resource starts after the wait.
    """
    triggers: dict[str, pulumi.Input[str]] = {
        f"grant{index}": grant.id
        for index, grant in enumerate(grants)
        if isinstance(grant, pulumi.CustomResource)
    }
    return time.Sleep(
        placement.name(suffix),
        time.SleepArgs(create_duration=IAM_PROPAGATION_WAIT, triggers=triggers),
        opts=placement.opts(parent, grants),
    )
