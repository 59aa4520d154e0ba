"""A run ledger that makes Cloud Scheduler's at-least-once deliveries run their work once."""

from runledger.exceptions import LeaseLost, TerminalJobError
from runledger.sdk.context import RunContext
from runledger.sdk.registry import Jobs

# The distribution's version (pyproject.toml reads it here; CHANGELOG.md has each one).
__version__ = "0.3.0"

__all__ = ["Jobs", "LeaseLost", "RunContext", "TerminalJobError", "__version__"]
