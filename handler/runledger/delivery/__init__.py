"""The delivery path: a Scheduler request in, its run identified, claimed, run, answered."""
