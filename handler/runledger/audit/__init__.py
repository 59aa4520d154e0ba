"""The audit: every scheduled time of every job held against the ledger, and its report."""
