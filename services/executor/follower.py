"""The owning run follows its own log for commands: control events and user interrupts.

Any replica may append them (DESIGN §2); this is how the replica running the workflow sees
them. A broken stream (an events service restart) is resumed from the next seq.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from services.executor.policies.control import CONTROL_EVENT_TYPES, RunControl
from services.executor.policies.interrupts import InterruptInbox

log = logging.getLogger(__name__)

COMMAND_EVENT_TYPES = (*CONTROL_EVENT_TYPES, "MESSAGE_RECEIVED")
RECONNECT_FIRST_SECONDS = 0.05
RECONNECT_MAX_SECONDS = 1.0


@dataclass(frozen=True)
class LogCommand:
    seq: int
    type: str
    payload: Mapping[str, Any] = field(default_factory=dict)


class CommandSourceUnavailable(Exception):
    """The log could not be read for now; following resumes from the next seq."""


class CommandSource(Protocol):
    def follow(self, workflow_id: str, tenant_id: str, from_seq: int) -> AsyncIterator[LogCommand]:
        """Command events from `from_seq` on, live; ends after the log's STREAM_END."""
        ...


class RunReceiver:
    """Where one run's commands land, whichever path brings them."""

    def __init__(self) -> None:
        self.control = RunControl()
        self.interrupts = InterruptInbox()

    def deliver(self, command: LogCommand) -> None:
        if command.type == "MESSAGE_RECEIVED":
            if command.payload.get("from") == "user":
                self.interrupts.deliver(command.seq, str(command.payload.get("content") or ""))
        elif command.type in CONTROL_EVENT_TYPES:
            reason = str(command.payload.get("reason") or "")
            self.control.apply(command.seq, command.type, reason)


async def follow_commands(
    source: CommandSource, workflow_id: str, tenant_id: str, receiver: RunReceiver
) -> None:
    """Feed `receiver` until the log ends (or the task is cancelled with the run)."""
    next_seq = 1
    delay = RECONNECT_FIRST_SECONDS
    while True:
        try:
            async for command in source.follow(workflow_id, tenant_id, next_seq):
                receiver.deliver(command)
                next_seq = command.seq + 1
                delay = RECONNECT_FIRST_SECONDS
            return
        except CommandSourceUnavailable as exc:
            log.info(
                "command stream interrupted, resuming",
                extra={"workflow_id": workflow_id, "from_seq": next_seq, "error": str(exc)},
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_SECONDS)
        except Exception:
            # The run goes on; only commands from other replicas are lost to it.
            log.exception("cannot follow the log for commands", extra={"workflow_id": workflow_id})
            return
