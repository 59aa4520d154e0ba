"""A reusable deduplicated Cloud Scheduler schedule.

`dedup_schedule.config` is pure Python (no Pulumi import) and shared with offline
tools; `dedup_schedule.component` holds the `DedupSchedule` ComponentResource and is
imported explicitly by Pulumi programs, so importing the package stays cheap.
"""
