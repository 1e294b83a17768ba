"""The name the API gives a workflow's status (`pending`, `running`, `paused`, `completed`,
`failed`, `cancelled`): the proto enum's, without its prefix, in lower case.

Its own module because the routes and the session logic (conversations.py) both name
statuses, and the session logic must not depend on the routes."""

from __future__ import annotations

from shuttle.v1 import common_pb2


def status_name(value: int) -> str:
    return common_pb2.WorkflowStatus.Name(value).removeprefix("WORKFLOW_STATUS_").lower()  # type: ignore[arg-type]
