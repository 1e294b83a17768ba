"""An idle workflow's blocking read must not make the hot tier think Redis is down.

The pump blocks on XREAD for up to BLOCK_MS. If its connection's socket timeout were no
longer than that (redis-py's default is 5 s, the same as the block), every idle read would
time out on the client first: the connection dropped, Redis marked unavailable and publishes
skipped until the retry. Regression test for that, against a real redis-server of the test's
own, so the only clients it lists are this test's.
"""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from services.events.redis_hot import BLOCK_MS, RedisHotTier
from tests.support.databases import PrivateRedis

from .helpers import NEVER_RETRY_SECONDS, blocked_xread_ages, stored

GIVE_UP_SECONDS = 60.0


async def test_an_idle_blocking_read_outlasting_the_block_keeps_redis_available(
    private_redis: PrivateRedis,
) -> None:
    writer = RedisHotTier(private_redis.url, prefix="idle:", retry_seconds=NEVER_RETRY_SECONDS)
    reader = RedisHotTier(private_redis.url, prefix="idle:", retry_seconds=NEVER_RETRY_SECONDS)
    inspector = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    block_seconds = BLOCK_MS / 1000
    try:
        await writer.publish("wf-idle", [stored(1, workflow_id="wf-idle")])
        waiting = asyncio.create_task(reader.wait("wf-idle", 1))

        # Idle until one connection has stayed blocked in XREAD for longer than a whole
        # block: its first read came back empty and it is waiting again, still connected.
        deadline = time.monotonic() + GIVE_UP_SECONDS
        while not any(age > block_seconds for age in await blocked_xread_ages(inspector)):
            assert reader.available, "an idle blocking read marked Redis unavailable"
            assert not waiting.done()
            assert time.monotonic() < deadline, (
                f"no XREAD connection survived a {block_seconds:.0f} s block "
                f"within {GIVE_UP_SECONDS:.0f} s"
            )
            await asyncio.sleep(0.2)
        assert reader.available and writer.available

        # Another replica's append still reaches the idle subscriber through Redis.
        await writer.publish("wf-idle", [stored(2, workflow_id="wf-idle")])
        await asyncio.wait_for(waiting, GIVE_UP_SECONDS)
        window = await reader.read("wf-idle", 2, 10)
        assert [event.seq for event in window.events] == [2]
        assert reader.available
    finally:
        await inspector.aclose()
        await writer.close()
        await reader.close()
