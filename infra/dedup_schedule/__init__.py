"""A reusable deduplicated Cloud Scheduler schedule.

The config (`config.model`: the model, `config.parser`: `parse_config`) is pure Python,
with no Pulumi import, and shared with the offline tools. `component` holds the
`DedupSchedule` ComponentResource, composed of the child components in `ledger`,
`handler_service`, `scheduler_jobs` and `monitoring`; `job_ids` is the plan-time check
that the handler defines every scheduled job id. Pulumi programs import them
explicitly, so importing the package stays cheap.
"""
