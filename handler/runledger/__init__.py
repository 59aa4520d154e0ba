"""A run ledger that makes Cloud Scheduler's at-least-once deliveries run their work once."""

from runledger.exceptions import LeaseLost, TerminalJobError
from runledger.sdk.context import RunContext
from runledger.sdk.registry import Jobs

__all__ = ["Jobs", "LeaseLost", "RunContext", "TerminalJobError"]
