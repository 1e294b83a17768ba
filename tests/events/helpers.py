"""Small builders shared by the events tests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis

from services.events.records import Appended, NewEvent, StoredEvent
from services.events.redis_hot import RedisHotTier
from shuttle.envelope import type_value
from shuttle.v1 import common_pb2

TierMaker = Callable[..., RedisHotTier]
"""The `tiers` fixture: makes Redis hot tiers on the test's key prefix."""


def new(kind: str, payload: dict[str, Any] | None = None, message: str = "") -> NewEvent:
    """A domain event of type `kind` with an optional payload."""
    return NewEvent(
        type=kind,
        agent_id="agent-main",
        message=message,
        payload_json=json.dumps(payload) if payload is not None else "",
    )


def draft(
    kind: str, payload: dict[str, Any] | None = None, message: str = ""
) -> common_pb2.EventDraft:
    """A protobuf draft of type `kind` with an optional payload."""
    return common_pb2.EventDraft(
        type=type_value(kind),
        agent_id="agent-main",
        message=message,
        payload_json=json.dumps(payload) if payload is not None else "",
    )


def progress(count: int) -> list[NewEvent]:
    return [new("PROGRESS", {"step": step}) for step in range(count)]


def stored(
    seq: int, kind: str = "PROGRESS", workflow_id: str = "wf-1", *, payload_json: str = ""
) -> StoredEvent:
    """A committed event as the hot tiers and the encoder see it; its message names its
    workflow and seq. The timestamp has microseconds, which every tier must keep."""
    return StoredEvent(
        workflow_id=workflow_id,
        seq=seq,
        type=kind,
        agent_id="a",
        message=f"{workflow_id} #{seq}",
        payload_json=payload_json or json.dumps({"n": seq}),
        timestamp=datetime(2026, 1, 2, 3, 4, 5, 678_901, tzinfo=UTC),
        trace_id="t",
    )


async def collect(events: AsyncIterator[StoredEvent]) -> list[StoredEvent]:
    return [event async for event in events]


def seqs(events: list[StoredEvent] | Appended) -> list[int]:
    if isinstance(events, Appended):
        return events.seqs
    return [event.seq for event in events]


# For tests on a private Redis: long enough that a tier which wrongly marks Redis down stays
# down for the whole test.
NEVER_RETRY_SECONDS = 600.0


async def blocked_xread_ages(inspector: aioredis.Redis) -> list[int]:
    """Connection ages (s) of the clients now blocked in XREAD."""
    clients = await inspector.client_list()
    return [
        int(client["age"])
        for client in clients
        if client.get("cmd") == "xread" and "b" in client.get("flags", "")
    ]
