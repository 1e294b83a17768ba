"""One caller's watches on the commands of many workflows, merged into one bounded feed.

An executor replica follows the commands of every run it owns over one call
(EventService.FollowCommands) instead of one stream per run: a stream per run costs the
executor a gRPC call's memory for the whole run, a watch here costs a task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any

from shuttle.envelope import COMMAND_EVENT_TYPES
from shuttle.metrics import COMMAND_WATCHES

from .log import EventLog
from .records import StoredEvent

log = logging.getLogger(__name__)

FEED_QUEUE_MAX = 256
"""Items waiting for the caller; a watch with more to say waits (its log reader with it)."""


@dataclass(frozen=True)
class WatchItem:
    workflow_id: str
    events: tuple[StoredEvent, ...] = ()
    ended: bool = False
    """The log reached STREAM_END: the watch is over."""
    error: Exception | None = None
    """The watch failed and is over."""


class CommandWatches:
    """Watches by workflow id, each a task reading its log; `items()` is what they found."""

    def __init__(self, event_log: EventLog, queue_max: int = FEED_QUEUE_MAX) -> None:
        self._log = event_log
        self._queue: asyncio.Queue[WatchItem | None] = asyncio.Queue(queue_max)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._finishing = False
        self._closed = False
        self._closer: asyncio.Task[None] | None = None

    def watch(self, workflow_id: str, tenant_id: str, from_seq: int) -> None:
        """Follow `workflow_id` from `from_seq`; a watch already there starts over."""
        self._start(workflow_id, self._follow(workflow_id, tenant_id, from_seq))

    def refuse(self, workflow_id: str, error: Exception) -> None:
        """Answer a watch that cannot start with `error`, in its turn with the others."""
        self._start(workflow_id, self._queue.put(WatchItem(workflow_id, error=error)))

    def unwatch(self, workflow_id: str) -> None:
        task = self._tasks.pop(workflow_id, None)
        if task is not None:
            task.cancel()
            COMMAND_WATCHES.dec()

    def finish(self) -> None:
        """No more watches will come: `items()` ends once the current ones have."""
        self._finishing = True
        self._end_if_idle()

    async def items(self) -> AsyncIterator[WatchItem]:
        while (item := await self._queue.get()) is not None:
            yield item

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._tasks.values())
        for workflow_id in list(self._tasks):
            self.unwatch(workflow_id)
        if self._closer is not None:
            tasks.append(self._closer)
            self._closer.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _start(self, workflow_id: str, work: Coroutine[Any, Any, None]) -> None:
        self.unwatch(workflow_id)
        task: asyncio.Task[None] = asyncio.create_task(work)
        self._tasks[workflow_id] = task
        COMMAND_WATCHES.inc()
        task.add_done_callback(lambda done: self._done(workflow_id, done))

    def _done(self, workflow_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(workflow_id) is task:
            del self._tasks[workflow_id]
            COMMAND_WATCHES.dec()
        self._end_if_idle()

    def _end_if_idle(self) -> None:
        if self._finishing and not self._tasks and self._closer is None and not self._closed:
            # A task, since the queue may be full: the end comes after what is queued.
            self._closer = asyncio.create_task(self._queue.put(None))

    async def _follow(self, workflow_id: str, tenant_id: str, from_seq: int) -> None:
        try:
            batches = self._log.stream_batches(
                workflow_id, tenant_id, from_seq=from_seq, types=COMMAND_EVENT_TYPES
            )
            async for batch in batches:
                commands = tuple(e for e in batch if e.type != "STREAM_END")
                ended = len(commands) < len(batch)
                await self._queue.put(WatchItem(workflow_id, commands, ended))
                if ended:
                    return
            # The reader already had the whole log.
            await self._queue.put(WatchItem(workflow_id, ended=True))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._queue.put(WatchItem(workflow_id, error=exc))
