"""A Python client of Shuttle's gateway: start tasks, follow their typed events (resuming
after a dropped connection), control runs and decide approvals.

    from shuttle.client import ShuttleClient

    with ShuttleClient("http://127.0.0.1:8080", api_key="sk-…") as shuttle:
        workflow_id = shuttle.start_task("What is 12*7?")
        for event in shuttle.events(workflow_id):
            print(event.seq, event.type, event.message)
        print(shuttle.get_task(workflow_id).result)
"""

from shuttle.client.gateway import ShuttleClient
from shuttle.client.models import Event, Frame, ShuttleError, Task, TaskSummary, Usage

__all__ = ["Event", "Frame", "ShuttleClient", "ShuttleError", "Task", "TaskSummary", "Usage"]
