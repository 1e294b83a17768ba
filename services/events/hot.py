"""Hot tier: recent events of each workflow (durable and ephemeral) and live wake-ups.

Subscribers are cursors over one shared per-workflow buffer rather than queues of their
own: an appender only appends and notifies, so a slow subscriber neither blocks it nor
loses events; one that falls behind the buffer's start reads the gap from SQL.

Buffers are bounded by events and by bytes, per workflow and in total; past a bound the
oldest events go (for the total, those of the workflows least recently appended to). An
evicted durable event is still in SQL; an evicted ephemeral one is gone, as after the TTL.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import Protocol

from shuttle.paced_signal import DEFAULT_SECONDS_PER_WAITER, PacedSignal

from .records import StoredEvent
from .sizes import held_bytes

DEFAULT_MAX_EVENTS = 10_000
DEFAULT_MAX_BYTES = 128 * 1024 * 1024
DEFAULT_MAX_WORKFLOW_BYTES = 32 * 1024 * 1024
DEFAULT_TTL_SECONDS = 24 * 3600.0
# Eviction is a scan over all buffers; once a minute is plenty for a 24 h retention.
SWEEP_INTERVAL_SECONDS = 60.0


@dataclass(frozen=True)
class HotWindow:
    """What the hot tier holds of one workflow at or after some seq.

    ``first_seq`` is the oldest seq held (None: nothing known of this workflow); the tier
    holds every seq from ``first_seq`` to its newest without a hole, so a reader whose
    cursor is below ``first_seq`` must fetch ``[cursor, first_seq)`` from SQL. When every
    event has been evicted, ``first_seq`` is one past the newest seq published.
    """

    first_seq: int | None
    events: list[StoredEvent]

    def covers(self, seq: int) -> bool:
        return self.first_seq is not None and self.first_seq <= seq


class HotTier(Protocol):
    """Recent events of every workflow plus a way to wait for new ones."""

    async def publish(self, workflow_id: str, events: Sequence[StoredEvent]) -> None:
        """Add committed events, which arrive in seq order, and wake the workflow's waiters."""
        ...

    async def read(
        self,
        workflow_id: str,
        from_seq: int,
        limit: int,
        types: Collection[str] | None = None,
    ) -> HotWindow:
        """Up to `limit` held events with seq >= `from_seq` (of `types`, when given)."""
        ...

    async def forget(self, workflow_id: str) -> None:
        """Drop everything held for a deleted workflow."""
        ...

    def reading(self, workflow_id: str) -> AbstractContextManager[None]:
        """Count a reader of the workflow while it follows (it paces the wake-ups)."""
        ...

    async def pace(self, workflow_id: str) -> None:
        """For a reader just served: wait for the workflow's next paced wake-up if one is
        held (see shuttle.paced_signal), else return at once."""
        ...

    async def wait(self, workflow_id: str, after_seq: int) -> None:
        """Return once the tier holds a seq above `after_seq` (at once if it already does),
        or once the workflow is forgotten."""
        ...


@dataclass
class _Buffer:
    events: deque[StoredEvent]
    touched: float
    # Wakes the workflow's readers, paced by how many follow it (see shuttle.paced_signal).
    changed: PacedSignal
    # The newest seq published, kept when eviction empties the buffer: waiters compare
    # against it, and readers learn that everything up to it must come from SQL.
    last_seq: int = 0
    # What the held events count for (sizes.held_bytes).
    bytes: int = 0


class MemoryHotTier:
    """The embedded hot tier: in-process buffers bounded by events and bytes (see the module
    docstring), evicted after `ttl_seconds` idle.

    Single event loop only; every method runs without awaiting between reading and
    changing a buffer, so no lock is needed beyond the signal used for wake-ups.
    """

    def __init__(
        self,
        *,
        max_events: int = DEFAULT_MAX_EVENTS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_workflow_bytes: int = DEFAULT_MAX_WORKFLOW_BYTES,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        seconds_per_reader: float = DEFAULT_SECONDS_PER_WAITER,
    ) -> None:
        if max_events < 1:
            raise ValueError("max_events must be at least 1")
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._max_workflow_bytes = max_workflow_bytes
        self._ttl = ttl_seconds
        self._clock = clock
        self._seconds_per_reader = seconds_per_reader
        self._buffers: dict[str, _Buffer] = {}
        # The buffers holding events, least recently appended to first: where the total
        # bound evicts.
        self._recent: OrderedDict[str, _Buffer] = OrderedDict()
        self.bytes = 0
        """What every held event counts for (sizes.held_bytes)."""
        self._last_sweep = clock()

    async def publish(self, workflow_id: str, events: Sequence[StoredEvent]) -> None:
        now = self._clock()
        buffer = self._buffer(workflow_id, now)
        held = buffer.events
        added = 0
        for event in events:
            last = buffer.last_seq
            if event.seq <= last:
                continue  # already published: a repeat
            if held and event.seq != last + 1:
                # Some batch never reached this tier. Drop the older run rather than hold a
                # range with a hole in it: readers then take the missing seqs from SQL.
                self._drop_all(buffer)
                added = 0
            held.append(event)
            added += held_bytes(event)
            buffer.last_seq = event.seq
        buffer.bytes += added
        self.bytes += added
        if len(held) > self._max_events or buffer.bytes > self._max_workflow_bytes:
            self._trim(buffer)
        if held:
            self._recent[workflow_id] = buffer
            self._recent.move_to_end(workflow_id)
        else:
            self._recent.pop(workflow_id, None)
        if self.bytes > self._max_bytes:
            self._evict_least_recent()
        buffer.touched = now
        buffer.changed.notify()
        if now - self._last_sweep >= SWEEP_INTERVAL_SECONDS:
            self.sweep()

    async def read(
        self,
        workflow_id: str,
        from_seq: int,
        limit: int,
        types: Collection[str] | None = None,
    ) -> HotWindow:
        buffer = self._buffers.get(workflow_id)
        if buffer is None or not buffer.last_seq:
            return HotWindow(first_seq=None, events=[])
        if not buffer.events:
            return HotWindow(first_seq=buffer.last_seq + 1, events=[])
        first_seq = buffer.events[0].seq
        selected: list[StoredEvent] = []
        if limit > 0:
            # Seqs in a buffer are contiguous, so a seq maps straight to its position; live
            # readers want the tail, which is walked from the right end (a deque is slow to
            # index in the middle).
            wanted = buffer.last_seq - max(from_seq, first_seq) + 1
            tail = list(islice(reversed(buffer.events), max(wanted, 0)))
            tail.reverse()
            for event in tail:
                if types and event.type not in types:
                    continue
                selected.append(event)
                if len(selected) >= limit:
                    break
        return HotWindow(first_seq=first_seq, events=selected)

    async def wait(self, workflow_id: str, after_seq: int) -> None:
        buffer = self._buffer(workflow_id, self._clock())
        # A forgotten (deleted) workflow's buffer never changes again: its waiters return,
        # and their reader finds the workflow gone.
        while buffer.last_seq <= after_seq and self._buffers.get(workflow_id) is buffer:
            await buffer.changed.wait()

    @contextmanager
    def reading(self, workflow_id: str) -> Iterator[None]:
        signal = self._buffer(workflow_id, self._clock()).changed
        signal.readers += 1
        try:
            yield
        finally:
            signal.readers -= 1

    async def pace(self, workflow_id: str) -> None:
        buffer = self._buffers.get(workflow_id)
        if buffer is not None:
            await buffer.changed.pace()

    async def forget(self, workflow_id: str) -> None:
        buffer = self._buffers.pop(workflow_id, None)
        if buffer is not None:
            self._release(workflow_id, buffer)
            buffer.changed.wake_now()  # waiters re-check and find the workflow gone

    def sweep(self) -> int:
        """Drop buffers idle longer than the TTL that nobody follows; return how many."""
        now = self._clock()
        self._last_sweep = now
        idle = [
            workflow_id
            for workflow_id, buffer in self._buffers.items()
            if not (buffer.changed.readers or buffer.changed.waiters)
            and now - buffer.touched >= self._ttl
        ]
        for workflow_id in idle:
            self._release(workflow_id, self._buffers.pop(workflow_id))
        return len(idle)

    def last_seq(self, workflow_id: str) -> int:
        """The newest seq held for a workflow (0: none)."""
        buffer = self._buffers.get(workflow_id)
        return buffer.last_seq if buffer else 0

    def held(self, workflow_id: str) -> int:
        """How many events the tier holds for a workflow (for tests and metrics)."""
        buffer = self._buffers.get(workflow_id)
        return len(buffer.events) if buffer else 0

    def held_bytes(self, workflow_id: str) -> int:
        """What the events held for a workflow count for (sizes.held_bytes)."""
        buffer = self._buffers.get(workflow_id)
        return buffer.bytes if buffer else 0

    def _trim(self, buffer: _Buffer) -> None:
        """Evict the buffer's oldest events until it is within its own bounds."""
        while buffer.events and (
            len(buffer.events) > self._max_events or buffer.bytes > self._max_workflow_bytes
        ):
            self._pop_oldest(buffer)

    def _evict_least_recent(self) -> None:
        """Evict the oldest events of the workflows least recently appended to until the
        total is within its bound."""
        while self.bytes > self._max_bytes and self._recent:
            workflow_id, buffer = next(iter(self._recent.items()))
            while buffer.events and self.bytes > self._max_bytes:
                self._pop_oldest(buffer)
            if not buffer.events:
                del self._recent[workflow_id]

    def _pop_oldest(self, buffer: _Buffer) -> None:
        size = held_bytes(buffer.events.popleft())
        buffer.bytes -= size
        self.bytes -= size

    def _drop_all(self, buffer: _Buffer) -> None:
        self.bytes -= buffer.bytes
        buffer.bytes = 0
        buffer.events.clear()

    def _release(self, workflow_id: str, buffer: _Buffer) -> None:
        """Stop counting a buffer that is going away."""
        self.bytes -= buffer.bytes
        buffer.bytes = 0
        self._recent.pop(workflow_id, None)

    def _buffer(self, workflow_id: str, now: float) -> _Buffer:
        buffer = self._buffers.get(workflow_id)
        if buffer is None:
            buffer = _Buffer(
                events=deque(), touched=now, changed=PacedSignal(self._seconds_per_reader)
            )
            self._buffers[workflow_id] = buffer
        return buffer
