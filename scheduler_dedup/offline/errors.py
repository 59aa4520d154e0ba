"""The one error type of the offline policy check.

Every module of the checker (stack, pack, config) can find a problem that is
the user's to fix: a missing stack file, a directory that is not a pack, a policy
config that does not validate. They all raise `CheckError`, and only the command
line (`scheduler_dedup.offline.policy_check.main`) turns it into a single `error: ...` line and
exit status 2; it lives on its own so no module has to import the CLI to raise it.
"""

from __future__ import annotations


class CheckError(Exception):
    """A usage or configuration problem, reported as one `error: ...` line (exit 2)."""
