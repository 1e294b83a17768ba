"""Commands over one EventService.Stream per watched workflow: how runs are followed through
an events service that predates FollowCommands (an older release during a rolling upgrade).

Each watch is a Stream call from its seq with the command types; what it brings becomes the
same FeedItems a FollowCommands call would have sent, so the feed cannot tell them apart.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator

import grpc

from services.executor.follower import FeedItem, LogCommand, Unwatch, Watch, WatchRequest
from services.executor.grpc_clients import RETRYABLE_CODES
from shuttle.envelope import COMMAND_EVENT_TYPES, type_name, type_value
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

log = logging.getLogger(__name__)

_COMMAND_TYPES = [type_value(name) for name in COMMAND_EVENT_TYPES]
_STREAM_END = type_value("STREAM_END")
# A stopping events service drops its calls (CANCELLED) where a stopped one refuses them.
_RETRYABLE_CODES = RETRYABLE_CODES | {grpc.StatusCode.CANCELLED}


def command(event: common_pb2.Event) -> LogCommand:
    payload = json.loads(event.payload_json) if event.payload_json else {}
    return LogCommand(
        int(event.seq), type_name(event.type), payload if isinstance(payload, dict) else {}
    )


class _SessionFailed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class StreamSession:
    """One session as a Stream call per watch: Unwatch cancels that call, and the session
    ends once its requests have and every watch is over. An exception raised by `requests`
    ends the session with it."""

    def __init__(
        self,
        stub: events_pb2_grpc.EventServiceAsyncStub,
        requests: AsyncIterator[WatchRequest],
    ) -> None:
        self._stub = stub
        self._requests = requests
        self._items: asyncio.Queue[FeedItem | _SessionFailed | None] = asyncio.Queue()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._finishing = False
        self._ended = False

    async def items(self) -> AsyncGenerator[FeedItem, None]:
        reader = asyncio.create_task(self._read())
        try:
            while (item := await self._items.get()) is not None:
                if isinstance(item, _SessionFailed):
                    raise item.error
                yield item
        finally:
            tasks = [reader, *self._tasks.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _read(self) -> None:
        try:
            async for request in self._requests:
                if isinstance(request, Unwatch):
                    self._unwatch(request.workflow_id)
                else:
                    self._watch(request)
        except Exception as exc:
            self._items.put_nowait(_SessionFailed(exc))
            return
        self._finishing = True
        self._end_if_idle()

    def _watch(self, watch: Watch) -> None:
        self._unwatch(watch.workflow_id)
        task = asyncio.create_task(self._follow(watch))
        self._tasks[watch.workflow_id] = task
        task.add_done_callback(lambda done: self._done(watch.workflow_id, done))

    def _unwatch(self, workflow_id: str) -> None:
        task = self._tasks.pop(workflow_id, None)
        if task is not None:
            task.cancel()

    def _done(self, workflow_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(workflow_id) is task:
            del self._tasks[workflow_id]
        self._end_if_idle()

    def _end_if_idle(self) -> None:
        if self._finishing and not self._tasks and not self._ended:
            self._ended = True
            self._items.put_nowait(None)

    async def _follow(self, watch: Watch) -> None:
        call = self._stub.Stream(
            events_pb2.StreamRequest(
                workflow_id=watch.workflow_id,
                tenant_id=watch.tenant_id,
                from_seq=watch.from_seq,
                types=_COMMAND_TYPES,
            ),
            metadata=tenant_metadata(watch.tenant_id),
        )
        try:
            async for event in call:
                if event.type == _STREAM_END:
                    self._items.put_nowait(FeedItem(watch.workflow_id, ended=True))
                    return
                self._items.put_nowait(FeedItem(watch.workflow_id, (command(event),)))
            # Only a stopping service ends a stream before STREAM_END.
            error = "UNAVAILABLE: the stream ended before STREAM_END"
            self._items.put_nowait(FeedItem(watch.workflow_id, error=error, retryable=True))
        except grpc.aio.AioRpcError as exc:
            self._items.put_nowait(
                FeedItem(
                    watch.workflow_id,
                    error=f"{exc.code().name}: {exc.details()}",
                    retryable=exc.code() in _RETRYABLE_CODES,
                )
            )
        except Exception as exc:
            log.exception("command stream failed", extra={"workflow_id": watch.workflow_id})
            self._items.put_nowait(FeedItem(watch.workflow_id, error=f"INTERNAL: {exc}"))
        finally:
            call.cancel()
