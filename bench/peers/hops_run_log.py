"""A run's events on the hops peer's executor, sent as Shuttle's emitter sends them: a batch
lingers after its oldest event, and every run's batches share one AppendStream call."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

from shuttle.envelope import type_value
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

LINGER_SECONDS = 0.005
"""As Shuttle's emitter lingers by default (SHUTTLE_EVENTS_LINGER_MS)."""
AGENT = "agent-main"


class Appends:
    """Every run's batches over one AppendStream, answered by id."""

    def __init__(self, log: events_pb2_grpc.EventServiceAsyncStub) -> None:
        self._log = log
        self._outbox: asyncio.Queue[events_pb2.AppendCall] | None = None
        self._waiting: dict[int, asyncio.Future[events_pb2.AppendAnswer]] = {}
        self._ids = itertools.count(1)
        self._reader: asyncio.Task[None] | None = None

    async def append(self, workflow_id: str, drafts: list[common_pb2.EventDraft]) -> None:
        if self._outbox is None:
            self._outbox = asyncio.Queue()
            self._reader = asyncio.create_task(self._read(self._outbox))
        call_id = next(self._ids)
        answer = self._waiting[call_id] = asyncio.get_running_loop().create_future()
        request = events_pb2.AppendRequest(workflow_id=workflow_id, events=drafts)
        self._outbox.put_nowait(events_pb2.AppendCall(id=call_id, request=request))
        await answer

    async def _read(self, outbox: asyncio.Queue[events_pb2.AppendCall]) -> None:
        async def calls() -> AsyncIterator[events_pb2.AppendCall]:
            while True:
                yield await outbox.get()

        try:
            async for answer in self._log.AppendStream(calls()):
                self._waiting.pop(answer.id).set_result(answer)
        finally:
            # A broken call fails its runs rather than leaving them waiting.
            for waiting in self._waiting.values():
                waiting.set_exception(RuntimeError("the peer's AppendStream ended"))
            self._waiting.clear()


class RunLog:
    """One run's events, appended in order: a batch goes LINGER_SECONDS after its oldest
    event was queued, or at once when the run closes, as Shuttle's emitter sends them."""

    def __init__(self, appends: Appends, workflow_id: str) -> None:
        self._appends = appends
        self._workflow_id = workflow_id
        self._queue: list[common_pb2.EventDraft] = []
        self._oldest = 0.0
        self._sender: asyncio.Task[None] | None = None
        self._lingering: asyncio.Future[None] | None = None
        self._closing = False

    def emit(self, event_type: str, message: str, payload: dict[str, Any]) -> None:
        draft = common_pb2.EventDraft(
            type=type_value(event_type),
            agent_id=AGENT,
            message=message,
            payload_json=json.dumps(payload),
        )
        if not self._queue:
            self._oldest = asyncio.get_running_loop().time()
        self._queue.append(draft)
        if self._sender is None:
            self._sender = asyncio.create_task(self._send())

    async def close(self) -> None:
        self._closing = True
        if self._lingering is not None:
            _finish(self._lingering)
        while self._sender is not None:
            await self._sender

    async def _send(self) -> None:
        loop = asyncio.get_running_loop()
        while self._queue:
            due = self._oldest + LINGER_SECONDS
            if not self._closing and loop.time() < due:
                self._lingering = loop.create_future()
                timer = loop.call_at(due, _finish, self._lingering)
                await self._lingering
                timer.cancel()
            batch, self._queue = self._queue, []
            await self._appends.append(self._workflow_id, batch)
        self._sender = None


def _finish(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
