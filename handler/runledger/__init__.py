"""A run ledger that makes Cloud Scheduler's at-least-once deliveries run their work once."""

from runledger.context import RunContext
from runledger.exceptions import LeaseLost, TerminalJobError
from runledger.jobs import Jobs

__all__ = ["Jobs", "LeaseLost", "RunContext", "TerminalJobError"]
