"""A run's state rebuilt from its log, for the replica that takes the run over: pure folds of
the recorded events into the states the engine goes on from (no I/O here)."""
