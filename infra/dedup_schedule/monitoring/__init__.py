"""`RunMonitoring` and its parts: what the handler's log lines say about every run.

`component` holds the ComponentResource; `metrics` the log-based metrics, `alerts`
the alert policies on them, `channels` the notification channels those notify,
`dashboard` the charts, all built with `builders` (scope, filters, conditions).
"""
