"""The run ledger: the claim-and-lease state machine, its records and the stores that keep them."""
