"""One blocking XREAD per replica, over every workflow someone on the replica is following.

A read per followed workflow would hold one Redis connection each, so a few hundred live
workflows would exhaust any pool. Instead one task reads all followed streams at once and
copies their new entries into the replica's local tier, which wakes the waiters. A workflow
followed while that read is blocked rings a per-replica doorbell stream the read also
watches, so the read returns at once and the next one includes the new workflow.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError
from redis.typing import KeyT, StreamIdT

from .hot import MemoryHotTier
from .records import StoredEvent

BLOCK_MS = 5_000
PUMP_BATCH = 1_000
DOORBELL_TTL_SECONDS = 24 * 3600

Decoder = Callable[[str, dict[str, str]], StoredEvent]
ErrorReport = Callable[[str, BaseException], None]


@dataclass
class _Follow:
    last: int
    """The highest seq copied into the local tier (or already known to the waiters)."""
    users: int = 0


class StreamPump:
    """Follows many workflows' Redis streams with one connection and one blocking read."""

    def __init__(
        self,
        reader: Redis,
        commands: Redis,
        *,
        key: Callable[[str], str],
        doorbell_prefix: str,
        local: MemoryHotTier,
        decode: Decoder,
        on_error: ErrorReport,
        retry_seconds: float,
    ) -> None:
        self._reader = reader
        self._commands = commands
        self._key = key
        self._doorbell = f"{doorbell_prefix}pump:{uuid.uuid4().hex}"
        self._doorbell_last = "0-0"
        self._local = local
        self._decode = decode
        self._on_error = on_error
        self._retry = retry_seconds
        self._follows: dict[str, _Follow] = {}
        self._task: asyncio.Task[None] | None = None
        self._reading: frozenset[str] = frozenset()
        self._rung = False

    @property
    def following(self) -> int:
        return len(self._follows)

    async def follow(self, workflow_id: str, after_seq: int) -> None:
        """Copy this workflow's entries after `after_seq` from Redis until `unfollow`."""
        follow = self._follows.get(workflow_id)
        if follow is None:
            follow = self._follows[workflow_id] = _Follow(after_seq)
        follow.users += 1
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="redis-stream-pump")
        elif workflow_id not in self._reading and self._reading and not self._rung:
            await self._ring()

    def unfollow(self, workflow_id: str) -> None:
        # The entry stays until the current read returns: live readers stop waiting after
        # every event and follow again at once, and the read must not restart for each.
        follow = self._follows.get(workflow_id)
        if follow is not None:
            follow.users -= 1

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._follows.clear()
        with contextlib.suppress(RedisError, OSError):
            await self._commands.delete(self._doorbell)

    async def _ring(self) -> None:
        """Wake the blocked read so that the next one includes the newly followed stream."""
        self._rung = True
        pipe = self._commands.pipeline(transaction=False)
        pipe.xadd(self._doorbell, {"r": "1"}, maxlen=1, approximate=False)
        pipe.expire(self._doorbell, DOORBELL_TTL_SECONDS)
        try:
            await pipe.execute()
        except (RedisError, OSError) as exc:
            self._rung = False
            self._on_error("pump doorbell", exc)

    async def _run(self) -> None:
        while True:
            for workflow_id in [w for w, f in self._follows.items() if f.users <= 0]:
                del self._follows[workflow_id]
            if not self._follows:
                self._task = None
                return
            by_key = {self._key(w): w for w in self._follows}
            streams: dict[KeyT, StreamIdT] = {self._doorbell: self._doorbell_last}
            for key, workflow_id in by_key.items():
                # This replica's own appends are in the local tier already: skip past them.
                follow = self._follows[workflow_id]
                follow.last = max(follow.last, self._local.last_seq(workflow_id))
                streams[key] = f"{follow.last}-0"
            self._reading, self._rung = frozenset(self._follows), False
            try:
                reply: Any = await self._reader.xread(streams, count=PUMP_BATCH, block=BLOCK_MS)
            except (RedisError, OSError) as exc:
                self._on_error("pump", exc)
                self._reading = frozenset()
                await asyncio.sleep(self._retry)
                continue
            self._reading = frozenset()
            for key, entries in reply or []:
                if not entries:
                    continue
                if key == self._doorbell:
                    self._doorbell_last = entries[-1][0]
                    continue
                await self._copy(by_key[key], entries)

    async def _copy(self, workflow_id: str, entries: list[tuple[str, dict[str, str]]]) -> None:
        follow = self._follows.get(workflow_id)
        if follow is None:
            return
        held = self._local.last_seq(workflow_id)
        events = [
            self._decode(workflow_id, fields)
            for entry_id, fields in entries
            if _seq_of(entry_id) > held
        ]
        if events:
            await self._local.publish(workflow_id, events)
        follow.last = max(follow.last, _seq_of(entries[-1][0]))


def _seq_of(entry_id: str) -> int:
    """The seq of a stream entry id ``<seq>-0``."""
    return int(entry_id.partition("-")[0])
