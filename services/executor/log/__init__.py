"""What writes a run's events: the reporter names them, the emitter batches and appends them."""
