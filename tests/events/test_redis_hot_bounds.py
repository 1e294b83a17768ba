"""RedisHotTier's byte bound on each stream, against a real Redis: what goes first, the
counts kept beside the stream, and a stream that predates them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from services.events.records import StoredEvent
from services.events.redis_hot import encode
from services.events.sizes import held_bytes

from .helpers import TierMaker, stored

PAYLOAD = json.dumps({"text": "x" * 1000})


def event(seq: int, workflow_id: str = "wf-1") -> StoredEvent:
    return stored(seq, "THREAD_MESSAGE_DELTA", workflow_id, payload_json=PAYLOAD)


# Seqs 1-9 encode to the same size.
SIZE = len(encode(event(1)))


@pytest.fixture
async def inspector(redis_server: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server, decode_responses=True)
    yield client
    await client.aclose()


async def entry_seqs(inspector: aioredis.Redis, key: str) -> list[int]:
    entries = await inspector.xrange(key) or []
    return [int(str(entry_id).split("-")[0]) for entry_id, _ in entries]


async def test_a_stream_past_its_byte_bound_drops_its_oldest_entries(
    tiers: TierMaker, inspector: aioredis.Redis
) -> None:
    tier = tiers(max_workflow_bytes=3 * SIZE)
    await tier.publish("wf-1", [event(1), event(2)])
    await tier.publish("wf-1", [event(3), event(4), event(5)])
    await tier.publish("wf-2", [event(1, "wf-2")])
    assert await entry_seqs(inspector, tier.key("wf-1")) == [3, 4, 5]
    assert await entry_seqs(inspector, tier.key("wf-2")) == [1]
    counts = [int(c) for c in await inspector.lrange(tier.counts_key("wf-1"), 0, -1)]
    # The bytes before the oldest entry held, then the running total through each.
    assert counts == [2 * SIZE, 3 * SIZE, 4 * SIZE, 5 * SIZE]
    # Another replica reads what the stream holds; the evicted seqs are SQL's to give.
    window = await tiers().read("wf-1", 1, 10)
    assert window.first_seq == 3 and not window.covers(2)
    assert [e.seq for e in window.events] == [3, 4, 5]


async def test_the_event_count_still_bounds_a_stream(
    tiers: TierMaker, inspector: aioredis.Redis
) -> None:
    tier = tiers(max_events=2)
    await tier.publish("wf-1", [event(seq) for seq in range(1, 6)])
    assert await entry_seqs(inspector, tier.key("wf-1")) == [4, 5]
    assert await inspector.llen(tier.counts_key("wf-1")) == 3


async def test_an_event_past_the_bound_alone_is_dropped_and_its_seq_still_refused(
    tiers: TierMaker, inspector: aioredis.Redis
) -> None:
    tier = tiers(max_workflow_bytes=SIZE - 1)
    await tier.publish("wf-1", [event(1)])
    assert await entry_seqs(inspector, tier.key("wf-1")) == []
    await tiers().publish("wf-1", [stored(1, workflow_id="wf-1")])  # a repeat: refused
    assert await entry_seqs(inspector, tier.key("wf-1")) == []
    await tier.publish("wf-1", [stored(2, workflow_id="wf-1")])
    assert await entry_seqs(inspector, tier.key("wf-1")) == [2]


async def test_a_stream_without_counts_is_counted_afresh(
    tiers: TierMaker, inspector: aioredis.Redis
) -> None:
    tier = tiers(max_workflow_bytes=3 * SIZE)
    key = tier.key("wf-1")
    # As written before counts were kept (or with the counts key lost alone).
    for seq in range(1, 4):
        await inspector.xadd(key, {"e": encode(event(seq)).decode()}, id=f"{seq}-0")
    await tier.publish("wf-1", [event(4)])
    assert await entry_seqs(inspector, key) == [2, 3, 4]
    counts = [int(c) for c in await inspector.lrange(tier.counts_key("wf-1"), 0, -1)]
    assert counts == [SIZE, 2 * SIZE, 3 * SIZE, 4 * SIZE]


async def test_forget_deletes_the_stream_and_its_counts(
    tiers: TierMaker, inspector: aioredis.Redis
) -> None:
    tier = tiers(ttl_seconds=3600)
    await tier.publish("wf-1", [event(1)])
    assert 0 < await inspector.ttl(tier.counts_key("wf-1")) <= 3600
    await tier.forget("wf-1")
    assert await inspector.exists(tier.key("wf-1"), tier.counts_key("wf-1")) == 0


async def test_the_replicas_own_cache_is_bounded_too(tiers: TierMaker) -> None:
    held = held_bytes(event(1))
    tier = tiers(max_bytes=2 * held, max_workflow_bytes=100 * SIZE)
    await tier.publish("wf-1", [event(seq) for seq in range(1, 6)])
    assert tier.cached_bytes == 2 * held
