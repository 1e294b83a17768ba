"""Control and Interrupt as any replica takes them: check the transition, append to the log.

The replica that owns the run acts on the appended event at its next checkpoint (it follows
its log); when that replica is this one, the event is also handed over at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from shuttle.workflow_log import LogCommand

TERMINAL_STATUSES = frozenset({"COMPLETED", "FAILED", "CANCELLED"})


class ControlAction(StrEnum):
    PAUSE = "PAUSE"
    RESUME = "RESUME"
    CANCEL = "CANCEL"


_EVENT_OF = {
    ControlAction.PAUSE: ("WORKFLOW_PAUSING", "Pause requested"),
    ControlAction.RESUME: ("WORKFLOW_RESUMED", "Workflow resumed"),
    ControlAction.CANCEL: ("WORKFLOW_CANCELLING", "Cancellation requested"),
}


class InvalidCommand(ValueError):
    """The request itself is malformed."""


class InvalidTransition(Exception):
    """The workflow's state forbids the command (FAILED_PRECONDITION)."""


class WorkflowLog(Protocol):
    async def status(self, workflow_id: str, tenant_id: str) -> str:
        """PENDING, RUNNING, PAUSED, COMPLETED, FAILED or CANCELLED; NOT_FOUND is raised."""
        ...

    async def control_events(self, workflow_id: str, tenant_id: str) -> Sequence[LogCommand]:
        """Every WORKFLOW_PAUSING / _PAUSED / _RESUMED / _CANCELLING event, in seq order."""
        ...

    async def append(
        self, workflow_id: str, tenant_id: str, type_: str, message: str, payload: Mapping[str, Any]
    ) -> int:
        """Append one event; its seq."""
        ...


LocalDelivery = Callable[[str, LogCommand], None]


@dataclass(frozen=True)
class ControlState:
    paused: bool
    """Paused, or a pause is requested and not yet resumed."""
    cancelling: bool


def control_state(events: Sequence[LogCommand]) -> ControlState:
    paused = False
    cancelling = False
    for event in events:
        if event.type in ("WORKFLOW_PAUSING", "WORKFLOW_PAUSED"):
            paused = True
        elif event.type == "WORKFLOW_RESUMED":
            paused = False
        elif event.type == "WORKFLOW_CANCELLING":
            cancelling = True
    return ControlState(paused, cancelling)


def check_transition(action: ControlAction, status: str, state: ControlState) -> None:
    if status in TERMINAL_STATUSES:
        raise InvalidTransition(f"workflow is {status.lower()}; it cannot be {_verb(action)}")
    if state.cancelling:
        raise InvalidTransition(f"workflow is being cancelled; it cannot be {_verb(action)}")
    if action is ControlAction.PAUSE and state.paused:
        raise InvalidTransition("workflow is already paused (or a pause is pending)")
    if action is ControlAction.RESUME and not state.paused:
        raise InvalidTransition("workflow is not paused")


def _verb(action: ControlAction) -> str:
    return {"PAUSE": "paused", "RESUME": "resumed", "CANCEL": "cancelled"}[action.value]


class CommandDesk:
    def __init__(self, log: WorkflowLog, local: LocalDelivery) -> None:
        self._log = log
        self._local = local

    async def control(
        self, workflow_id: str, tenant_id: str, action: ControlAction, reason: str = ""
    ) -> str:
        """Append the command's event; the workflow's status as it stands now."""
        status = await self._log.status(workflow_id, tenant_id)
        state = control_state(await self._log.control_events(workflow_id, tenant_id))
        check_transition(action, status, state)
        type_, message = _EVENT_OF[action]
        payload = {"action": action.value, "reason": reason}
        seq = await self._log.append(workflow_id, tenant_id, type_, message, payload)
        self._local(workflow_id, LogCommand(seq, type_, payload))
        return status

    async def interrupt(self, workflow_id: str, tenant_id: str, content: str) -> int:
        """Append the user's follow-up as MESSAGE_RECEIVED; its seq."""
        if not content.strip():
            raise InvalidCommand("message must not be empty")
        status = await self._log.status(workflow_id, tenant_id)
        if status in TERMINAL_STATUSES:
            raise InvalidTransition(
                f"Interrupt refused: workflow is {status.lower()}; it takes no more messages"
            )
        if control_state(await self._log.control_events(workflow_id, tenant_id)).cancelling:
            raise InvalidTransition(
                "Interrupt refused: workflow is being cancelled; it takes no more messages"
            )
        payload = {"from": "user", "content": content, "acknowledged": False}
        message = f"Message from user: {content[:80]}"
        seq = await self._log.append(workflow_id, tenant_id, "MESSAGE_RECEIVED", message, payload)
        self._local(workflow_id, LogCommand(seq, "MESSAGE_RECEIVED", payload))
        return seq
