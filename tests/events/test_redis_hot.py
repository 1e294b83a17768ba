"""RedisHotTier against a real Redis: ids, TTL, cross-replica fan-out, holes, outages."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from sqlalchemy.ext.asyncio import AsyncEngine

from services.events.log import EventLog
from services.events.redis_hot import RedisHotTier
from services.events.store import SqlEventStore
from tests.support.databases import EngineMaker, PrivateRedis

from .helpers import TierMaker, collect, new, progress, stored


async def test_events_are_stream_entries_with_seq_ids_and_a_ttl(
    tiers: TierMaker, redis_server: str
) -> None:
    tier = tiers(ttl_seconds=3600)
    await tier.publish("wf-1", [stored(1), stored(2), stored(3)])
    client = aioredis.Redis.from_url(redis_server, decode_responses=True)
    try:
        entries = await client.xrange(tier.key("wf-1"))
        ttl = await client.ttl(tier.key("wf-1"))
    finally:
        await client.aclose()
    assert [entry_id for entry_id, _ in entries or []] == ["1-0", "2-0", "3-0"]
    assert 0 < ttl <= 3600


async def test_another_replica_reads_and_is_woken(tiers: TierMaker) -> None:
    writer, reader = tiers(), tiers()
    await writer.publish("wf-1", [stored(1), stored(2)])
    window = await reader.read("wf-1", 1, 10)
    assert (window.first_seq, [e.seq for e in window.events]) == (1, [1, 2])
    assert window.events[1] == stored(2)
    waiting = asyncio.create_task(reader.wait("wf-1", 2))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await writer.publish("wf-1", [stored(3)])
    await asyncio.wait_for(waiting, 10)
    assert [e.seq for e in (await reader.read("wf-1", 3, 10)).events] == [3]


async def test_a_hole_is_reported_not_skipped(tiers: TierMaker) -> None:
    tier = tiers()
    await tier.publish("wf-1", [stored(1), stored(2)])
    await tier.publish("wf-1", [stored(5), stored(6)])  # 3 and 4 never reached Redis
    other = tiers()
    window = await other.read("wf-1", 3, 10)
    assert window.first_seq == 5 and not window.covers(3)
    window = await other.read("wf-1", 1, 10)
    assert [e.seq for e in window.events] == [1, 2]  # stops at the hole


async def test_out_of_order_publish_does_not_raise(tiers: TierMaker) -> None:
    tier = tiers()
    await tier.publish("wf-1", [stored(4)])
    await tier.publish("wf-1", [stored(3)])  # refused by Redis: id not above the top
    assert [e.seq for e in (await tiers().read("wf-1", 1, 10)).events] == [4]


async def test_a_refused_event_is_logged_and_the_rest_of_its_batch_added(
    tiers: TierMaker, caplog: pytest.LogCaptureFixture
) -> None:
    tier = tiers()
    await tier.publish("wf-1", [stored(4)])
    with caplog.at_level("WARNING", logger="services.events.redis_hot"):
        await tier.publish("wf-1", [stored(3), stored(5), stored(6)])
    assert [e.seq for e in (await tiers().read("wf-1", 4, 10)).events] == [4, 5, 6]
    warnings = [r for r in caplog.records if r.getMessage().startswith("hot tier refused")]
    assert len(warnings) == 1
    assert "equal or smaller" in warnings[0].__dict__["error"]
    assert tier.available


async def test_unreachable_redis_neither_fails_publish_nor_read(
    private_redis: PrivateRedis,
) -> None:
    writer = RedisHotTier(private_redis.url, prefix="x:", retry_seconds=0.2)
    reader = RedisHotTier(private_redis.url, prefix="x:", retry_seconds=0.2)
    try:
        await writer.publish("wf-1", [stored(1)])
        private_redis.stop()
        await writer.publish("wf-1", [stored(2)])  # no exception: SQL is the source of truth
        assert not writer.available
        # Nothing held as far as the reader can tell, so the log reads SQL instead.
        assert (await reader.read("wf-1", 1, 10)).first_seq is None
        assert not reader.available
    finally:
        await writer.close()
        await reader.close()


async def logs_on(engines: EngineMaker, tiers: TierMaker, count: int) -> list[EventLog]:
    return [EventLog(SqlEventStore(engines()), tiers(), poll_seconds=0.2) for _ in range(count)]


async def test_subscriber_on_one_replica_sees_writes_on_another_including_ephemeral(
    engines: EngineMaker, tiers: TierMaker
) -> None:
    writer, reader = await logs_on(engines, tiers, 2)
    await writer.create_workflow(tenant_id="t1", workflow_id="wf-x")
    subscription = asyncio.create_task(collect(reader.stream("wf-x", "t1", from_seq=1)))
    await asyncio.sleep(0.1)
    await writer.append("wf-x", "t1", progress(2))
    await writer.append("wf-x", "t1", [new("THREAD_MESSAGE_DELTA", {"delta": "hi"})])
    await writer.append("wf-x", "t1", [new("WORKFLOW_COMPLETED", {"result": "hi"})])
    events = await asyncio.wait_for(subscription, 20)
    assert [(e.seq, e.type) for e in events] == [
        (1, "PROGRESS"),
        (2, "PROGRESS"),
        (3, "THREAD_MESSAGE_DELTA"),
        (4, "WORKFLOW_COMPLETED"),
        (5, "STREAM_END"),
    ]


async def test_replay_after_the_hot_tier_is_flushed_comes_from_sql(
    engines: EngineMaker, tiers: TierMaker, redis_server: str, redis_prefix: str
) -> None:
    (writer,) = await logs_on(engines, tiers, 1)
    await writer.create_workflow(tenant_id="t1", workflow_id="wf-f")
    await writer.append("wf-f", "t1", [*progress(3), new("LLM_PARTIAL", {"chunk": "x"})])
    await writer.append("wf-f", "t1", [new("WORKFLOW_COMPLETED")])
    client = aioredis.Redis.from_url(redis_server)
    try:
        assert await client.delete(f"{redis_prefix}events:{{wf-f}}") == 1
    finally:
        await client.aclose()
    # A fresh replica: nothing local, nothing in Redis; SQL has the durable events.
    (fresh,) = await logs_on(engines, tiers, 1)
    events = await collect(fresh.stream("wf-f", "t1", from_seq=2))
    assert [(e.seq, e.type) for e in events] == [
        (2, "PROGRESS"),
        (3, "PROGRESS"),
        (5, "WORKFLOW_COMPLETED"),
        (6, "STREAM_END"),
    ]


async def test_redis_stopped_mid_run_appends_still_accepted_and_served(
    engines: EngineMaker, private_redis: PrivateRedis, engine: AsyncEngine
) -> None:
    def tier() -> RedisHotTier:
        return RedisHotTier(private_redis.url, prefix="t:", retry_seconds=0.3)

    writer_tier, reader_tier = tier(), tier()
    writer = EventLog(SqlEventStore(engines()), writer_tier, poll_seconds=0.2)
    reader = EventLog(SqlEventStore(engines()), reader_tier, poll_seconds=0.2)
    try:
        await writer.create_workflow(tenant_id="t1", workflow_id="wf-down")
        subscription = asyncio.create_task(collect(reader.stream("wf-down", "t1", from_seq=1)))
        await writer.append("wf-down", "t1", progress(2))
        private_redis.stop()
        assert await writer.append("wf-down", "t1", progress(2)) == [3, 4]
        await writer.append("wf-down", "t1", [new("WORKFLOW_COMPLETED")])
        events = await asyncio.wait_for(subscription, 30)
        assert [e.seq for e in events] == [1, 2, 3, 4, 5, 6]
        replay = await collect(reader.stream("wf-down", "t1", from_seq=3))
        assert [e.seq for e in replay] == [3, 4, 5, 6]
    finally:
        await writer_tier.close()
        await reader_tier.close()
