"""The executor: runs a task's agent loop and reports every step to the workflow log."""
