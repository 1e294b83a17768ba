"""The event envelope: bare type names, which types are ephemeral or terminal, JSON form."""

from __future__ import annotations

import json
from typing import Any

from shuttle.v1 import common_pb2

_PREFIX = "EVENT_TYPE_"

EVENT_TYPE_NAMES: tuple[str, ...] = tuple(
    value.name.removeprefix(_PREFIX)
    for value in common_pb2.EventType.DESCRIPTOR.values
    if value.number != 0
)

# Held only in the hot tier: token-level traffic whose content is repeated by a durable event
# (THREAD_MESSAGE_COMPLETED carries the whole answer, LLM_OUTPUT the whole output).
EPHEMERAL_TYPES = frozenset({"LLM_PARTIAL", "THREAD_MESSAGE_DELTA", "LLM_PROMPT"})

# What EventService.FollowCommands delivers: control requests and user messages, which any
# replica may append and the replica owning the run must act on.
CONTROL_EVENT_TYPES = ("WORKFLOW_PAUSING", "WORKFLOW_RESUMED", "WORKFLOW_CANCELLING")
COMMAND_EVENT_TYPES = (*CONTROL_EVENT_TYPES, "MESSAGE_RECEIVED")

# After one of these, nothing but STREAM_END follows.
TERMINAL_TYPES = frozenset({"WORKFLOW_COMPLETED", "WORKFLOW_CANCELLED"})


def type_name(value: int) -> str:
    """Bare name of an EventType value, e.g. 11 -> "TOOL_INVOKED"."""
    return common_pb2.EventType.Name(value).removeprefix(_PREFIX)  # type: ignore[arg-type]


def type_value(name: str) -> common_pb2.EventType.ValueType:
    """EventType value of a bare or prefixed name; ValueError names the bad type."""
    bare = name.strip().upper().removeprefix(_PREFIX)
    if bare not in EVENT_TYPE_NAMES:
        raise ValueError(f"unknown event type {name!r}")
    return common_pb2.EventType.Value(_PREFIX + bare)


def stream_id(seq: int) -> str:
    return f"{seq}-0"


def to_json_dict(event: common_pb2.Event) -> dict[str, Any]:
    """The envelope as browsers and history readers see it (DESIGN §3)."""
    timestamp = event.timestamp.ToDatetime().isoformat(timespec="milliseconds") + "Z"
    return {
        "workflow_id": event.workflow_id,
        "type": type_name(event.type),
        "agent_id": event.agent_id,
        "message": event.message,
        "timestamp": timestamp,
        "seq": event.seq,
        "stream_id": event.stream_id,
        "payload": json.loads(event.payload_json) if event.payload_json else {},
        "trace_id": event.trace_id,
    }
