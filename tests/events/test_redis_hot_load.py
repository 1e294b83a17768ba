"""Hundreds of concurrent publishes and followed workflows keep the Redis hot tier up.

redis-py's asyncio pool refuses a connection past its size (MaxConnectionsError), which the
tier took for an outage: Redis marked down, publishes skipped, readers sent to SQL. Commands
now wait for a pooled connection, and all followed workflows share one blocking read.
Against a redis-server of the test's own, so the only clients it lists are this test's.
"""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from services.events.redis_hot import RedisHotTier
from tests.support.databases import PrivateRedis

from .helpers import NEVER_RETRY_SECONDS, blocked_xread_ages, stored

WORKFLOWS = 300
# More than the test's own pool, so that a burst has to wait for connections.
POOL_SIZE = 20
GIVE_UP_SECONDS = 90.0


async def test_bursts_and_many_followed_workflows_keep_the_tier_available(
    private_redis: PrivateRedis,
) -> None:
    writer = RedisHotTier(
        private_redis.url,
        prefix="load:",
        retry_seconds=NEVER_RETRY_SECONDS,
        max_connections=POOL_SIZE,
    )
    reader = RedisHotTier(private_redis.url, prefix="load:", retry_seconds=NEVER_RETRY_SECONDS)
    inspector = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    workflows = [f"wf-{n}" for n in range(WORKFLOWS)]
    waits: list[asyncio.Task[None]] = []
    try:
        await asyncio.gather(*(writer.publish(w, [stored(1, workflow_id=w)]) for w in workflows))
        assert writer.available, "a burst of publishes marked Redis unavailable"
        for w in workflows:
            assert (await inspector.xlen(writer.key(w))) == 1

        waits = [asyncio.create_task(reader.wait(w, 1)) for w in workflows]
        deadline = time.monotonic() + GIVE_UP_SECONDS
        while reader.following < WORKFLOWS or len(await blocked_xread_ages(inspector)) == 0:
            assert time.monotonic() < deadline, "the reader never blocked on its streams"
            await asyncio.sleep(0.05)
        # Every followed workflow shares the one blocked read.
        assert len(await blocked_xread_ages(inspector)) == 1

        await asyncio.gather(*(writer.publish(w, [stored(2, workflow_id=w)]) for w in workflows))
        await asyncio.wait_for(asyncio.gather(*waits), GIVE_UP_SECONDS)
        for w in workflows:
            window = await reader.read(w, 2, 10)
            assert [e.message for e in window.events] == [f"{w} #2"]
        assert writer.available and reader.available
    finally:
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        await inspector.aclose()
        await writer.close()
        await reader.close()


async def test_a_workflow_followed_while_the_read_blocks_is_delivered(
    private_redis: PrivateRedis,
) -> None:
    writer = RedisHotTier(private_redis.url, prefix="bell:", retry_seconds=NEVER_RETRY_SECONDS)
    reader = RedisHotTier(private_redis.url, prefix="bell:", retry_seconds=NEVER_RETRY_SECONDS)
    inspector = aioredis.Redis.from_url(private_redis.url, decode_responses=True)
    first = asyncio.create_task(reader.wait("wf-first", 0))
    second: asyncio.Task[None] | None = None
    try:
        deadline = time.monotonic() + GIVE_UP_SECONDS
        while len(await blocked_xread_ages(inspector)) == 0:
            assert time.monotonic() < deadline, "the reader never blocked on its stream"
            await asyncio.sleep(0.05)

        # Followed while the read blocks on the first workflow alone; the first workflow
        # stays silent, so only the doorbell can make the read include the second.
        second = asyncio.create_task(reader.wait("wf-second", 0))
        await writer.publish("wf-second", [stored(1, workflow_id="wf-second")])
        await asyncio.wait_for(second, GIVE_UP_SECONDS)
        window = await reader.read("wf-second", 1, 10)
        assert [e.seq for e in window.events] == [1]
        assert not first.done()
    finally:
        for task in (first, second):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await inspector.aclose()
        await writer.close()
        await reader.close()
