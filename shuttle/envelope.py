"""The event envelope: bare type names, which types are ephemeral or terminal, JSON form."""

from __future__ import annotations

import json
from typing import Any

from shuttle.v1 import common_pb2

_PREFIX = "EVENT_TYPE_"

# Bare name <-> value of every EventType but UNSPECIFIED. Every event crosses one of these
# lookups at least once (the events service both ways per event), and a dict is several
# times faster than the enum wrapper's lookup plus the prefix handling.
_VALUE_BY_NAME: dict[str, common_pb2.EventType.ValueType] = {
    value.name.removeprefix(_PREFIX): common_pb2.EventType.ValueType(value.number)
    for value in common_pb2.EventType.DESCRIPTOR.values
    if value.number != 0
}
_NAME_BY_VALUE: dict[int, str] = {value: name for name, value in _VALUE_BY_NAME.items()}

EVENT_TYPE_NAMES: tuple[str, ...] = tuple(_VALUE_BY_NAME)

# Held only in the hot tier: token-level traffic whose content is repeated by a durable event
# (THREAD_MESSAGE_COMPLETED carries the whole answer, LLM_OUTPUT the whole output).
EPHEMERAL_TYPES = frozenset({"LLM_PARTIAL", "THREAD_MESSAGE_DELTA", "LLM_PROMPT"})

# What EventService.FollowCommands delivers: control requests and user messages, which any
# replica may append and the replica owning the run must act on.
CONTROL_EVENT_TYPES = ("WORKFLOW_PAUSING", "WORKFLOW_RESUMED", "WORKFLOW_CANCELLING")
COMMAND_EVENT_TYPES = (*CONTROL_EVENT_TYPES, "MESSAGE_RECEIVED")

# After one of these, nothing but STREAM_END follows.
TERMINAL_TYPES = frozenset({"WORKFLOW_COMPLETED", "WORKFLOW_CANCELLED"})

# STATUS_UPDATE's payload.kind when a run taken over mid-synthesis tells its answer again:
# THREAD_MESSAGE_DELTA from index 0 follows, so every reader drops the answer it has so far.
ANSWER_RESTARTED = "answer_restarted"


def type_name(value: int) -> str:
    """Bare name of an EventType value, e.g. 11 -> "TOOL_INVOKED"."""
    name = _NAME_BY_VALUE.get(value)
    if name is not None:
        return name
    return common_pb2.EventType.Name(value).removeprefix(_PREFIX)  # type: ignore[arg-type]


def type_value(name: str) -> common_pb2.EventType.ValueType:
    """EventType value of a bare or prefixed name; ValueError names the bad type."""
    value = _VALUE_BY_NAME.get(name)
    if value is not None:
        return value
    bare = name.strip().upper().removeprefix(_PREFIX)
    if bare not in EVENT_TYPE_NAMES:
        raise ValueError(f"unknown event type {name!r}")
    return common_pb2.EventType.Value(_PREFIX + bare)


def stream_id(seq: int) -> str:
    return f"{seq}-0"


def to_json_dict(event: common_pb2.Event) -> dict[str, Any]:
    """The envelope as browsers and history readers see it."""
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
