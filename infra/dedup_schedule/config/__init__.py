"""The schedule a stack describes: its model, and the parser that builds it from stack config.

`model`: the validated dataclasses (`ScheduleConfig`, `JobConfig`, ...) and the values
derived from them (lease, retention, the audit's job and intervals, the handler's
environment); `capacity`: the requests the jobs can have in flight against what the
handler serves, derived from the model. `parser.parse_config`: a stack's config map in,
a `ScheduleConfig` out, with the `jobs` entries in `job_parser` and the `audit` and
`alerts` settings in `audit_parser`, all read through the generic typed reader of
`values`. Nothing here imports `pulumi`.
"""
