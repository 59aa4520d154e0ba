"""A seeded, deterministic simulation of the whole system: the real handler on a fake clock.

`python -m scheduler_dedup.localrun.simulation` (`make simulate`) runs seeds; docs/reliability.md,
"The simulator", says what it models, its faults, its oracle and how to replay a seed.
"""
