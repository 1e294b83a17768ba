"""How pause, resume, cancel and user interrupts reach a run: the desk appends them to the
log on any replica, the feed brings them to the replica that owns the run."""
