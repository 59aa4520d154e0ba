"""Exact backfill: run a job's past scheduled times again, once each, through the ledger.

`python -m runledger.ops backfill` (`runledger.ops.backfill`) plans with
`plan` and records a request with `queue`; the handler's audit job
(`runledger.service.audit_job`) runs the pending ones with `runs`. The request
documents live on Firestore beside the audit's epochs (`firestore_store`,
imported only where Firestore is used, never on a delivery's path).
"""
