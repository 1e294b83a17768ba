"""One run's events, appended in order, in batches, and retried without loss or duplication.

`emit` only queues: the engine never waits for the events service on its hot path. A single
sender task appends whatever has queued up while the previous Append was in flight (group
commit), so a burst of answer tokens costs a few Appends, not one each. With a linger, a batch
also waits until that long after its oldest event was queued (as a Kafka producer's
`linger.ms` does), so the events on either side of a fast tool call share one Append instead
of the model call and the tool call each cutting them in two. Every Append costs the events
service a commit and a wake-up of each of the log's readers, whatever it holds: at a
zero-latency model a 5 ms linger takes a quarter off its CPU per iteration, for at most that
much latency; `flush` and a full batch send at once. The sink is the run's producer, which
numbers the batches and resends one through an outage (shuttle/events_client/producer.py).
The sender runs only while there is something to send, so a run waiting on its model holds
no sender task.
"""

from __future__ import annotations

import asyncio
import contextlib

from services.executor.ports import EventSink
from shuttle.workflow_log import EventDraft, LogClosed, LogFenced, LogUnavailable

# How far the queue may run ahead of the events service before `emit` waits for it.
BACKLOG_BATCHES = 4


class EmitterFailed(Exception):
    """The events service stayed unreachable (or refused a batch); the run cannot report."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"events could not be appended: {cause}")
        self.cause = cause

    @property
    def refused(self) -> bool:
        """The events service refused a batch of an open log: another may still be taken."""
        return not isinstance(self.cause, LogUnavailable | LogClosed | LogFenced)

    @property
    def fenced(self) -> bool:
        """The run was taken over: it must stop without appending anything more."""
        return isinstance(self.cause, LogFenced)


class EventEmitter:
    def __init__(
        self,
        sink: EventSink,
        *,
        batch_max: int = 256,
        linger_seconds: float = 0.0,
    ) -> None:
        self._sink = sink
        self._batch_max = batch_max
        self._linger_seconds = linger_seconds
        self._queue: list[EventDraft] = []
        self._oldest_queued_at = 0.0
        """When the oldest event of the queue was queued (loop time)."""
        self._lingering: asyncio.Future[None] | None = None
        self._flushes = 0
        self._sender: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self.last_seq = 0
        """The highest seq the events service has given one of this run's events."""

    async def emit(self, draft: EventDraft) -> None:
        self._raise_failure()
        if not self._queue:
            self._oldest_queued_at = asyncio.get_running_loop().time()
        self._queue.append(draft)
        if self._sender is None:
            self._sender = asyncio.create_task(self._send_queued(), name="event-emitter")
        elif len(self._queue) >= self._batch_max:
            self._stop_lingering()
        if len(self._queue) >= self._batch_max * BACKLOG_BATCHES:
            await self.flush()

    async def flush(self) -> None:
        """Wait until everything emitted so far is in the log (sent at once, no lingering)."""
        self._flushes += 1
        try:
            self._stop_lingering()
            while self._sender is not None:
                # Shielded: a caller cancelled while flushing must not cancel the sending.
                await asyncio.shield(self._sender)
        finally:
            self._flushes -= 1
        self._raise_failure()

    async def close(self) -> None:
        """Flush; after a cancelled flush, stop the sender."""
        try:
            await self.flush()
        finally:
            if self._sender is not None:
                self._sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._sender
                self._sender = None

    def successor(self) -> EventEmitter:
        """An emitter that goes on after a refused batch: the same producer, so later batch
        numbers (a refused batch was never stored, so nothing can be taken twice)."""
        return EventEmitter(
            self._sink, batch_max=self._batch_max, linger_seconds=self._linger_seconds
        )

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise EmitterFailed(self._failure)

    async def _send_queued(self) -> None:
        """Send batches until the queue is empty, then end (`emit` starts a new sender)."""
        try:
            while self._queue:
                await self._linger()
                batch = self._queue[: self._batch_max]
                del self._queue[: self._batch_max]
                # What stays queued was there before this batch went: it waits no more.
                self._oldest_queued_at = float("-inf")
                try:
                    seqs = await self._send(batch)
                except Exception as exc:
                    self._failure = exc
                    self._queue.clear()
                    return
                if seqs:
                    self.last_seq = max(self.last_seq, *seqs)
                    # The sink took what fits in one append: the rest goes first next time,
                    # at once.
                    if len(seqs) < len(batch):
                        self._queue[:0] = batch[len(seqs) :]
                        self._oldest_queued_at = float("-inf")
        finally:
            if self._sender is asyncio.current_task():
                self._sender = None

    async def _linger(self) -> None:
        """Wait until the linger since the oldest queued event is over, unless someone is
        flushing or a batch is full."""
        if self._flushes or len(self._queue) >= self._batch_max:
            return
        loop = asyncio.get_running_loop()
        due = self._oldest_queued_at + self._linger_seconds
        if loop.time() >= due:
            return
        lingering = self._lingering = loop.create_future()
        timer = loop.call_at(due, _finish, lingering)
        try:
            await lingering
        finally:
            timer.cancel()
            self._lingering = None

    def _stop_lingering(self) -> None:
        if self._lingering is not None:
            _finish(self._lingering)

    async def _send(self, batch: list[EventDraft]) -> list[int]:
        try:
            return list(await self._sink.append(batch))
        except LogClosed:
            # The events service may close a log itself after its terminal event.
            if all(d.type == "STREAM_END" for d in batch):
                return []
            raise


def _finish(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
