"""Payload rules the log enforces whatever a producer sends: valid JSON, the TOOL_OBSERVATION
cut, what a terminal event must carry."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from shuttle.utf8 import json_text, storable_text

from .records import NewEvent, StoredEvent

STREAM_RESULT_LIMIT = 2_000
"""A TOOL_OBSERVATION's ``result`` is cut to this many characters on the stream."""


def cut(text: str, limit: int = STREAM_RESULT_LIMIT) -> tuple[str, bool]:
    """Cut on characters (code points), never inside one, so the text stays valid UTF-8."""
    if len(text) <= limit:
        return text, False
    return text[:limit], True


def shape_event(event: NewEvent) -> NewEvent:
    """A TOOL_OBSERVATION whose ``result`` is longer than the limit gets the cut result and
    ``truncated: true`` in its payload; the whole result rides along in ``full_result``
    to be stored beside it. Text columns get storable text (`storable_text`) here, before
    the event is streamed, so that a replay reads what the live stream showed."""
    # Text parsed from protobuf is valid UTF-8 already: on the append's hot path only NUL,
    # which protobuf allows and PostgreSQL refuses, is looked for.
    if "\x00" in event.agent_id or "\x00" in event.message or "\x00" in event.trace_id:
        event = _storable(event)
    if event.type != "TOOL_OBSERVATION" or not event.payload_json:
        return event
    payload = json.loads(event.payload_json)
    result = payload.get("result") if isinstance(payload, dict) else None
    if not isinstance(result, str):
        return event
    # Parsed, an escaped NUL or lone surrogate is a character SQL may refuse: the whole
    # result is kept as text, so such a character becomes U+FFFD there and in the cut alike.
    result = storable_text(result)
    shown, was_cut = cut(result)
    if not was_cut:
        return event
    payload["result"] = shown
    payload["truncated"] = True
    tool_name = payload.get("tool_name")
    return replace(
        event,
        payload_json=json_text(payload),
        full_result=result,
        tool_name=storable_text(tool_name) if isinstance(tool_name, str) else "",
    )


def _storable(event: NewEvent) -> NewEvent:
    return replace(
        event,
        agent_id=storable_text(event.agent_id),
        message=storable_text(event.message),
        trace_id=storable_text(event.trace_id),
    )


def shape_batch(batch: Sequence[NewEvent]) -> list[NewEvent]:
    return [shape_event(event) for event in batch]


def with_full_result(event: StoredEvent, result: str) -> StoredEvent:
    """A stored TOOL_OBSERVATION with its whole result put back into the payload."""
    payload = json.loads(event.payload_json)
    payload["result"] = result
    return replace(event, payload_json=json_text(payload))
