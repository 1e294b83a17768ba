"""DAG mode: a planned team of ReAct agents, replanned until the task is achieved."""
