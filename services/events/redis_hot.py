"""Redis hot tier: one Redis stream per workflow, shared by every replica.

Each committed event is added with the explicit id ``<seq>-0`` (the key expiring 24 h after
its last write), so a stream id is a resume token and Redis refuses a repeated seq by itself.
A stream is bounded by events and by bytes: beside it a list holds the running byte count
at each entry, so trimming the oldest entries needs no read of them. Every replica also
keeps a ``MemoryHotTier`` as a local cache and fan-out point: its own appends go there at
once, and while anyone on this replica waits on workflows one pump (``redis_pump``) blocks
on one ``XREAD`` over all of them and copies other replicas' events into it. So a thousand
subscribers, of one workflow or of a thousand, cost one Redis connection. Commands share a
bounded pool: a burst beyond it waits for a connection instead of failing.

Redis is never the source of truth. When it is unreachable, publishes are skipped (SQL
already holds the durable events) and reads report nothing held, so readers use SQL; the
tier retries Redis after ``retry_seconds``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import cast

from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import RedisError

from shuttle.paced_signal import DEFAULT_SECONDS_PER_WAITER
from shuttle.utf8 import json_bytes

from .hot import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_EVENTS,
    DEFAULT_MAX_WORKFLOW_BYTES,
    DEFAULT_TTL_SECONDS,
    HotWindow,
    MemoryHotTier,
)
from .records import StoredEvent
from .redis_pump import BLOCK_MS, StreamPump

log = logging.getLogger(__name__)

__all__ = ["BLOCK_MS", "RedisHotTier"]

RETRY_SECONDS = 2.0
BLOCKING_READ_MARGIN_SECONDS = 5.0
DEFAULT_MAX_CONNECTIONS = 64
# How long a command waits for a free pooled connection before Redis counts as unavailable.
POOL_WAIT_SECONDS = 5.0
COMMAND_TIMEOUT_SECONDS = 2.0

# A batch's events added in one command, each XADD on its own (an out-of-order one is
# refused alone), with one reply: the errors. A pipeline of one XADD per event had the client
# pack every command and parse every reply in Python, a third of the events service's GIL
# time when appending to PostgreSQL + Redis (py-spy --gil).
# The counts list holds the bytes added before the oldest entry, then the running total
# through each entry: what the stream holds is its last element minus its first, and
# dropping the oldest entry is one LPOP. A stream without it (written before it was kept,
# or one of the two keys lost alone) is counted afresh.
# KEYS[1]: the stream, KEYS[2]: its counts; ARGV: the most events, the TTL in seconds, the
# most bytes, then an entry id and its "e" per event.
_ADD_EVENTS = """
local stream, counts = KEYS[1], KEYS[2]
local max_events, max_bytes = tonumber(ARGV[1]), tonumber(ARGV[3])
local length = redis.call('XLEN', stream)
if redis.call('LLEN', counts) ~= length + 1 then
  redis.call('DEL', counts)
  redis.call('RPUSH', counts, 0)
  local counted, start = 0, '-'
  while true do
    local entries = redis.call('XRANGE', stream, start, '+', 'COUNT', 100)
    for _, entry in ipairs(entries) do
      counted = counted + string.len(entry[2][2])
      redis.call('RPUSH', counts, string.format('%.0f', counted))
    end
    if #entries < 100 then break end
    start = '(' .. entries[#entries][1]
  end
end
local total = tonumber(redis.call('LINDEX', counts, -1))
local refused = {}
for i = 4, #ARGV, 2 do
  local added = redis.pcall('XADD', stream, ARGV[i], 'e', ARGV[i + 1])
  if type(added) == 'table' and added.err then
    refused[#refused + 1] = added.err
  else
    total = total + string.len(ARGV[i + 1])
    redis.call('RPUSH', counts, string.format('%.0f', total))
    length = length + 1
  end
end
local kept = length
while kept > 0 and (kept > max_events
    or total - tonumber(redis.call('LINDEX', counts, 0)) > max_bytes) do
  redis.call('LPOP', counts)
  kept = kept - 1
end
if kept < length then
  redis.call('XTRIM', stream, 'MAXLEN', kept)
end
redis.call('EXPIRE', stream, ARGV[2])
redis.call('EXPIRE', counts, ARGV[2])
return refused
"""


class RedisHotTier:
    """A HotTier over Redis streams plus a local in-process cache and fan-out."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "shuttle:",
        max_events: int = DEFAULT_MAX_EVENTS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_workflow_bytes: int = DEFAULT_MAX_WORKFLOW_BYTES,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        clock: Callable[[], float] = time.monotonic,
        seconds_per_reader: float = DEFAULT_SECONDS_PER_WAITER,
    ) -> None:
        # Commands fail fast so an unreachable Redis cannot stall appends, but a burst larger
        # than the pool waits for a connection (redis-py's default pool raises
        # MaxConnectionsError past its size, which would mark a healthy Redis down).
        self._redis: Redis = Redis.from_pool(
            BlockingConnectionPool.from_url(
                url,
                max_connections=max_connections,
                timeout=POOL_WAIT_SECONDS,
                decode_responses=True,
                socket_timeout=COMMAND_TIMEOUT_SECONDS,
                socket_connect_timeout=COMMAND_TIMEOUT_SECONDS,
            )
        )
        # The pump's blocking read waits up to BLOCK_MS by design: its socket timeout must
        # outlast that, or (with the client's default of 5 s) every idle read would mark
        # Redis down.
        self._blocking: Redis = Redis.from_url(
            url,
            decode_responses=True,
            socket_timeout=BLOCK_MS / 1000 + BLOCKING_READ_MARGIN_SECONDS,
            socket_connect_timeout=2.0,
            health_check_interval=30,
        )
        self._add_events = self._redis.register_script(_ADD_EVENTS)
        self._prefix = prefix
        self._max_events = max_events
        self._max_workflow_bytes = max_workflow_bytes
        self._ttl = max(int(ttl_seconds), 1)
        self._retry = retry_seconds
        self._clock = clock
        self._down_until = 0.0
        # Redis holds the streams (each bounded by `max_workflow_bytes`, the total by Redis's
        # own maxmemory); this replica's cache is bounded like the in-process tier.
        self._local = MemoryHotTier(
            max_events=max_events,
            max_bytes=max_bytes,
            max_workflow_bytes=max_workflow_bytes,
            ttl_seconds=ttl_seconds,
            seconds_per_reader=seconds_per_reader,
        )
        self._pump = StreamPump(
            self._blocking,
            self._redis,
            key=self.key,
            doorbell_prefix=prefix,
            local=self._local,
            decode=decode,
            on_error=self._mark_down,
            retry_seconds=retry_seconds,
        )

    def key(self, workflow_id: str) -> str:
        # The braces are a Redis Cluster hash tag: one workflow's key stays on one shard.
        return f"{self._prefix}events:{{{workflow_id}}}"

    def counts_key(self, workflow_id: str) -> str:
        """The list of running byte counts beside the workflow's stream (same hash tag)."""
        return f"{self.key(workflow_id)}:bytes"

    @property
    def available(self) -> bool:
        return self._clock() >= self._down_until

    async def publish(self, workflow_id: str, events: Sequence[StoredEvent]) -> None:
        await self._local.publish(workflow_id, events)
        if not events or not self.available:
            return
        args: list[str | int | bytes] = [self._max_events, self._ttl, self._max_workflow_bytes]
        for event in events:
            args += (f"{event.seq}-0", encode(event))
        keys = [self.key(workflow_id), self.counts_key(workflow_id)]
        try:
            refused = await self._add_events(keys=keys, args=args)
        except (RedisError, OSError) as exc:
            self._mark_down("publish", exc)
            return
        for error in refused:
            # Mostly "ID equal or smaller": another replica published a later seq first (or
            # this batch was published before). Readers fill such a hole from SQL.
            log.warning(
                "hot tier refused an event; readers take it from SQL",
                extra={"workflow_id": workflow_id, "error": error},
            )

    async def read(
        self,
        workflow_id: str,
        from_seq: int,
        limit: int,
        types: Collection[str] | None = None,
    ) -> HotWindow:
        local = await self._local.read(workflow_id, from_seq, limit, types)
        if local.covers(from_seq) or not self.available:
            return local
        try:
            entries = await self._redis.xrange(
                self.key(workflow_id), min=f"{max(from_seq, 1)}-0", count=max(limit, 1)
            )
        except (RedisError, OSError) as exc:
            self._mark_down("read", exc)
            return HotWindow(first_seq=None, events=[])
        # decode_responses=True: every key and value is a str.
        held = _contiguous(
            [decode(workflow_id, cast(dict[str, str], fields)) for _id, fields in entries or []]
        )
        if not held:
            return HotWindow(first_seq=None, events=[])
        selected = [event for event in held if not types or event.type in types]
        return HotWindow(first_seq=held[0].seq, events=selected[:limit] if limit > 0 else [])

    @property
    def cached_bytes(self) -> int:
        """What this replica's own cache holds (sizes.held_bytes)."""
        return self._local.bytes

    @property
    def following(self) -> int:
        """How many workflows the pump reads for this replica's waiters."""
        return self._pump.following

    async def wait(self, workflow_id: str, after_seq: int) -> None:
        await self._pump.follow(workflow_id, after_seq)
        try:
            await self._local.wait(workflow_id, after_seq)
        finally:
            self._pump.unfollow(workflow_id)

    def reading(self, workflow_id: str) -> AbstractContextManager[None]:
        return self._local.reading(workflow_id)

    async def pace(self, workflow_id: str) -> None:
        await self._local.pace(workflow_id)

    async def forget(self, workflow_id: str) -> None:
        await self._local.forget(workflow_id)
        try:
            await self._redis.delete(self.key(workflow_id), self.counts_key(workflow_id))
        except (RedisError, OSError) as exc:
            # The key still expires with the hot tier's TTL.
            self._mark_down("forget", exc)

    async def close(self) -> None:
        await self._pump.close()
        await self._redis.aclose()
        await self._blocking.aclose()

    def _mark_down(self, operation: str, exc: BaseException) -> None:
        if self.available:
            log.warning(
                "redis unavailable; events are served from SQL until it is back",
                extra={"operation": operation, "error": repr(exc)},
            )
        self._down_until = self._clock() + self._retry


def _contiguous(events: list[StoredEvent]) -> list[StoredEvent]:
    """The leading run of consecutive seqs: a reader must not skip over a hole."""
    for index in range(1, len(events)):
        if events[index].seq != events[index - 1].seq + 1:
            return events[:index]
    return events


def encode(event: StoredEvent) -> bytes:
    return json_bytes(
        [
            event.type,
            event.agent_id,
            event.message,
            event.payload_json,
            event.timestamp.isoformat(),
            event.trace_id,
            event.seq,
        ]
    )


def decode(workflow_id: str, fields: dict[str, str]) -> StoredEvent:
    kind, agent_id, message, payload_json, timestamp, trace_id, seq = json.loads(fields["e"])
    return StoredEvent(
        workflow_id=workflow_id,
        seq=int(seq),
        type=kind,
        agent_id=agent_id,
        message=message,
        payload_json=payload_json,
        timestamp=datetime.fromisoformat(timestamp),
        trace_id=trace_id,
    )
