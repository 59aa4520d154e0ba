"""What wires the layers into the handler: the App that routes every request, and
the audit as the job it serves (judge, catch up, then the pending backfills).

It sits above delivery, audit and backfill and imports all three, so none of them
imports another's composition (docs/architecture.md "Layers").
"""
