"""What job code meets: the JOBS registry, a run's context, its checkpoints, logging and task id."""
