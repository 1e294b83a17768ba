"""Watchers of one workflow share one upstream call and each event's rendering.

A *feed* per (tenant, workflow) in this process follows the log through one
`EventService.StreamBatches` call (the events client's `follow`, which rides out restarts),
renders each event once, and keeps the newest rendered chunks (one per upstream batch) in a
buffer bounded in bytes. It never waits for a watcher; it reads the next batch only once
some watcher has taken everything, so nobody's events are read ahead for nobody. Watchers at
the head are woken in rounds paced by how many wait (shuttle.paced_signal), so a busy log
reaches a crowd as a few joined writes each rather than one write per upstream batch.

A *watcher* is a cursor: the seq it needs next. It takes what the buffer holds past its
cursor, a chunk at a time; a watcher that takes a whole chunk gets the chunk's own bytes.
A watcher whose cursor is older than the buffer (it resumed from further back, or its client
read too slowly and the buffer moved on) reads on its own upstream call from its cursor until
the buffer covers the cursor again, then rejoins. So a slow client costs the gateway at most
one chunk and its socket's buffers, and the others never wait for it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field

import grpc

from shuttle.events_client import EventsClient
from shuttle.events_client.follow import STREAM_END, Upstream, UpstreamError
from shuttle.metrics import SSE_CATCHUPS, SSE_FEEDS
from shuttle.paced_signal import SECONDS_PER_SSE_CLIENT, PacedSignal
from shuttle.v1 import common_pb2

log = logging.getLogger(__name__)

# Kept even once every watcher has them: a client reconnecting after a short cut joins at once.
RECENT_BYTES = 64 * 1024
# A watcher that is several chunks behind writes them joined, up to about this much at once:
# one write per wake-up instead of one per chunk (the copy stays small).
WRITE_BYTES = 64 * 1024

Render = Callable[[common_pb2.Event], bytes]
Types = frozenset[int] | None
FeedKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Rendered:
    event: common_pb2.Event
    frame: bytes


@dataclass(eq=False)
class Chunk:
    """Consecutive events of the log, each with its frame; never empty."""

    items: Sequence[Rendered]
    start: int
    """The reader's position before these events: the log delivered nothing in between."""
    _frames: bytes | None = field(default=None, repr=False)

    @property
    def next_seq(self) -> int:
        return self.items[-1].event.seq + 1

    @property
    def ends_log(self) -> bool:
        return self.items[-1].event.type == STREAM_END

    @property
    def frames(self) -> bytes:
        """Every item's frame, joined once."""
        if self._frames is None:
            self._frames = b"".join(item.frame for item in self.items)
        return self._frames

    def after(self, cursor: int, types: Types) -> Chunk | None:
        """The items at or after `cursor` a watcher asked for (STREAM_END always passes);
        this very chunk when that is all of them."""
        items = self.items
        if items[0].event.seq < cursor:
            items = [item for item in items if item.event.seq >= cursor]
        if types is not None:
            items = [i for i in items if i.event.type in types or i.event.type == STREAM_END]
        if len(items) == len(self.items):
            return self
        return Chunk(items, cursor) if items else None


def joined(chunks: Sequence[Chunk]) -> Chunk:
    items = [item for chunk in chunks for item in chunk.items]
    return Chunk(items, chunks[0].start, b"".join(chunk.frames for chunk in chunks))


def render_chunk(events: Sequence[common_pb2.Event], start: int, render: Render) -> Chunk:
    return Chunk([Rendered(event, render(event)) for event in events], start)


class Feed:
    """One upstream call of one workflow and the newest chunks it brought."""

    def __init__(self, from_seq: int, buffer_bytes: int, seconds_per_watcher: float) -> None:
        self.start = from_seq
        """The buffer holds every event the log delivered from this seq on."""
        self.next_seq = from_seq
        self.buffered_bytes = 0
        self.done = False
        """No more chunks will come: STREAM_END was read, or `error`."""
        self.error: UpstreamError | None = None
        self._buffer_bytes = buffer_bytes
        self._chunks: deque[Chunk] = deque()
        self._cursors: dict[int, int] = {}
        """The cursor of each watcher reading from the buffer, by watcher."""
        self._arrived = PacedSignal(seconds_per_watcher)
        self._hungry = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def watchers(self) -> int:
        return self._arrived.readers

    def join(self) -> None:
        self._arrived.readers += 1  # wake-ups are paced by how many watch

    def leave(self) -> None:
        self._arrived.readers -= 1

    def held_from(self, cursor: int) -> list[Chunk]:
        """The buffered chunks from the one holding `cursor` on, up to about WRITE_BYTES
        (empty once the cursor is at the newest event); the caller makes sure the cursor is
        not older than `start`."""
        first = len(self._chunks)
        for index in range(len(self._chunks) - 1, -1, -1):
            first = index
            if self._chunks[index].start <= cursor:
                break
        held: list[Chunk] = []
        size = 0
        for index in range(first, len(self._chunks)):
            chunk = self._chunks[index]
            if chunk.next_seq <= cursor:
                continue
            held.append(chunk)
            size += len(chunk.frames)
            if size >= WRITE_BYTES:
                break
        return held

    def reading(self, watcher: int, cursor: int | None) -> None:
        """Where `watcher` is in the buffer (None: it reads elsewhere, or left)."""
        if cursor is None:
            self._cursors.pop(watcher, None)
        else:
            self._cursors[watcher] = cursor

    async def wait(self) -> None:
        """Until something new arrives; meanwhile the feed may read the next batch."""
        self._hungry.set()
        await self._arrived.wait()

    async def pace(self) -> None:
        """For a watcher that has just taken chunks: wait for the held wake-up, if any, so
        it takes what comes meanwhile in the next round rather than chunk by chunk."""
        if self._arrived.holding:
            await self.wait()

    async def run(self, upstream: Upstream, render: Render) -> None:
        try:
            while True:
                # A watcher waiting for a held wake-up has taken everything: read on.
                if not self._arrived.waiters:
                    await self._hungry.wait()
                self._hungry.clear()
                batch = await anext(upstream, None)
                if batch is None:
                    break
                self._add(render_chunk(batch, self.next_seq, render))
                if self._chunks[-1].ends_log:
                    break
        except UpstreamError as exc:
            self.error = exc
        except Exception as exc:
            log.exception("SSE feed failed")
            self.error = UpstreamError(
                grpc.StatusCode.INTERNAL, f"the gateway could not follow the log: {exc}"
            )
        finally:
            self.done = True
            self._arrived.wake_now()
            await upstream.aclose()

    def _add(self, chunk: Chunk) -> None:
        self._chunks.append(chunk)
        self.buffered_bytes += len(chunk.frames)
        self.next_seq = chunk.next_seq
        # Chunks every watcher has taken go, beyond the recent ones kept for clients that
        # reconnect after a short cut; chunks over the limit go whoever still needs them.
        # The newest chunk always stays, whatever its size: watchers at the head need it.
        taken = -1
        if self.buffered_bytes > RECENT_BYTES:
            taken = min(self._cursors.values(), default=self.next_seq)
        while len(self._chunks) > 1 and (
            self.buffered_bytes > self._buffer_bytes
            or (self.buffered_bytes > RECENT_BYTES and self._chunks[0].next_seq <= taken)
        ):
            self.buffered_bytes -= len(self._chunks.popleft().frames)
            self.start = self._chunks[0].start
        self._arrived.notify()


class FanOut:
    """The feeds of this gateway process; tenants never share one."""

    def __init__(
        self,
        events: EventsClient,
        render: Render,
        *,
        buffer_bytes: int,
        retry_seconds: float,
        seconds_per_watcher: float = SECONDS_PER_SSE_CLIENT,
    ) -> None:
        self._events = events
        self._render = render
        self._buffer_bytes = buffer_bytes
        self._retry_seconds = retry_seconds
        self._seconds_per_watcher = seconds_per_watcher
        self._feeds: dict[FeedKey, Feed] = {}
        self._watcher_ids = itertools.count()

    @property
    def feeds(self) -> int:
        return len(self._feeds)

    @property
    def watchers(self) -> int:
        return sum(feed.watchers for feed in self._feeds.values())

    def buffered_bytes(self) -> int:
        return sum(feed.buffered_bytes for feed in self._feeds.values())

    async def watch(
        self, tenant: str, workflow_id: str, from_seq: int, types: Types = None
    ) -> AsyncGenerator[Chunk, None]:
        """The log from `from_seq` on, in chunks, through STREAM_END; only the `types`
        asked for (None: all). Raises UpstreamError after what it could deliver."""
        feed = self._join((tenant, workflow_id), from_seq)
        cursor = from_seq
        me = next(self._watcher_ids)
        try:
            while True:
                if cursor < feed.start:
                    SSE_CATCHUPS.inc()
                    feed.reading(me, None)
                    caught_up = False
                    upstream = self._follow(tenant, workflow_id, cursor)
                    try:
                        async for batch in upstream:
                            chunk = render_chunk(batch, cursor, self._render)
                            wanted = chunk.after(cursor, types)
                            cursor = chunk.next_seq
                            if wanted is not None:
                                yield wanted
                            if chunk.ends_log:
                                return
                            if cursor >= feed.start:
                                caught_up = True
                                break
                    finally:
                        await upstream.aclose()
                    if not caught_up:
                        return  # the log was over before the cursor
                    continue
                held = feed.held_from(cursor)
                if held:
                    taking = [c for chunk in held if (c := chunk.after(cursor, types))]
                    cursor = held[-1].next_seq
                    feed.reading(me, cursor)
                    if taking:
                        yield taking[0] if len(taking) == 1 else joined(taking)
                    if held[-1].ends_log:
                        return
                    await feed.pace()
                elif feed.done:
                    if feed.error is not None:
                        raise feed.error
                    return
                else:
                    feed.reading(me, cursor)
                    await feed.wait()
        finally:
            feed.reading(me, None)
            self._leave((tenant, workflow_id), feed)

    async def close(self) -> None:
        feeds = list(self._feeds.values())
        self._feeds.clear()
        SSE_FEEDS.set(0)
        for feed in feeds:
            if feed.task is not None:
                feed.task.cancel()
        await asyncio.gather(*(f.task for f in feeds if f.task), return_exceptions=True)

    def _follow(self, tenant: str, workflow_id: str, from_seq: int) -> Upstream:
        return self._events.follow(workflow_id, tenant, from_seq, retry_seconds=self._retry_seconds)

    def _join(self, key: FeedKey, from_seq: int) -> Feed:
        feed = self._feeds.get(key)
        if feed is None or feed.error is not None:
            # A failed feed is replaced: whoever comes next gets a fresh try.
            feed = Feed(from_seq, self._buffer_bytes, self._seconds_per_watcher)
            upstream = self._follow(*key, from_seq)
            feed.task = asyncio.create_task(feed.run(upstream, self._render))
            self._feeds[key] = feed
            SSE_FEEDS.set(len(self._feeds))
        feed.join()
        return feed

    def _leave(self, key: FeedKey, feed: Feed) -> None:
        feed.leave()
        if feed.watchers > 0:
            return
        # The last watcher ends the upstream call.
        if feed.task is not None:
            feed.task.cancel()
        if self._feeds.get(key) is feed:
            del self._feeds[key]
            SSE_FEEDS.set(len(self._feeds))
