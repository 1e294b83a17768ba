"""Which of Shuttle's components may call each EventService method, and append which events.

Only the executor writes a run's lifecycle; the tools service writes the approval gate's
events and nothing else; the planner only reports its model retries."""

from __future__ import annotations

from collections.abc import Sequence

from shuttle.grpc_auth import (
    ANY_COMPONENT,
    EXECUTOR,
    GATEWAY,
    OPERATOR,
    PLANNER,
    TOOLS,
    method_roles,
)

from .errors import EventsError
from .lifecycle import is_terminal
from .records import NewEvent
from .wire import SERVICE


class PermissionDenied(EventsError):
    """The calling component may not do this (append another component's events)."""


CALLER_ROLES = method_roles(
    SERVICE,
    {
        "CreateWorkflow": {EXECUTOR},
        "RenewLease": {EXECUTOR},
        "ClaimRuns": {EXECUTOR},
        "ReleaseLease": {EXECUTOR},
        "AppendStream": {EXECUTOR},  # its batches, and workflows as CreateWorkflow makes them
        "FollowCommands": {EXECUTOR},
        "DeleteWorkflows": {GATEWAY},
        "Append": {EXECUTOR, TOOLS, PLANNER},
        "GetWorkflow": ANY_COMPONENT,
        "Stream": ANY_COMPONENT,
        "StreamBatches": ANY_COMPONENT,
        "List": ANY_COMPONENT,
    },
)

APPROVAL_TYPES = frozenset({"APPROVAL_REQUESTED", "WAITING", "APPROVAL_DECISION"})
RETRY_REPORT_TYPES = frozenset({"ERROR_OCCURRED", "ERROR_RECOVERY"})
TOOLS_TYPES = APPROVAL_TYPES
"""What the tools service appends: its approval gate."""

_WHAT_EACH_APPENDS = {
    EXECUTOR: "every event but the approval gate's (APPROVAL_REQUESTED, WAITING, "
    "APPROVAL_DECISION), which are the tools service's",
    TOOLS: "only APPROVAL_REQUESTED, WAITING and APPROVAL_DECISION",
    PLANNER: "only its retry reports: ERROR_RECOVERY and ERROR_OCCURRED that is not fatal",
}


def check_append(method: str, role: str, events: Sequence[NewEvent]) -> None:
    """PermissionDenied, naming the method, `role` and the event, unless the caller `role`
    may append every one of `events`."""
    if role == OPERATOR:
        return
    for event in events:
        if not _may_append(role, event):
            allowed = _WHAT_EACH_APPENDS.get(role, "nothing")
            raise PermissionDenied(
                f"/{SERVICE.full_name}/{method}: the {role} role may not append {event.type}; "
                f"it appends {allowed}"
            )


def _may_append(role: str, event: NewEvent) -> bool:
    if role == EXECUTOR:
        return event.type not in APPROVAL_TYPES
    if role == TOOLS:
        return event.type in TOOLS_TYPES
    if role == PLANNER:
        return event.type in RETRY_REPORT_TYPES and not _fatal(event)
    return False


def _fatal(event: NewEvent) -> bool:
    try:
        return is_terminal(event)
    except ValueError:  # a payload that is not JSON: validation refuses it, naming why
        return False
