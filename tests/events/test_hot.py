"""MemoryHotTier: contiguous buffers, trimming, gap handling, wake-ups and eviction."""

from __future__ import annotations

import asyncio

import pytest

from services.events.hot import DEFAULT_TTL_SECONDS, MemoryHotTier
from services.events.records import StoredEvent

from .helpers import seqs, stored


def run(first: int, last: int, kind: str = "PROGRESS") -> list[StoredEvent]:
    return [stored(seq, kind, "wf-h") for seq in range(first, last + 1)]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_read_returns_held_events_from_a_seq() -> None:
    hot = MemoryHotTier()
    await hot.publish("wf-h", run(1, 5))
    window = await hot.read("wf-h", 3, limit=10)
    assert window.first_seq == 1
    assert seqs(window.events) == [3, 4, 5]
    assert seqs((await hot.read("wf-h", 1, limit=2)).events) == [1, 2]
    assert (await hot.read("wf-h", 6, limit=10)).events == []


async def test_read_of_unknown_workflow_holds_nothing() -> None:
    window = await MemoryHotTier().read("wf-none", 1, limit=10)
    assert window.first_seq is None
    assert not window.covers(1)


async def test_read_filters_types() -> None:
    hot = MemoryHotTier()
    await hot.publish(
        "wf-h",
        [
            stored(seq, kind, "wf-h")
            for seq, kind in enumerate(("PROGRESS", "LLM_PARTIAL", "PROGRESS", "LLM_PARTIAL"), 1)
        ],
    )
    window = await hot.read("wf-h", 1, limit=1, types={"LLM_PARTIAL"})
    assert seqs(window.events) == [2]


async def test_buffer_is_bounded_and_drops_the_oldest() -> None:
    hot = MemoryHotTier(max_events=4)
    await hot.publish("wf-h", run(1, 10))
    window = await hot.read("wf-h", 1, limit=100)
    assert window.first_seq == 7
    assert seqs(window.events) == [7, 8, 9, 10]
    assert not window.covers(6)
    assert hot.held("wf-h") == 4


async def test_repeated_publish_is_ignored() -> None:
    hot = MemoryHotTier()
    await hot.publish("wf-h", run(1, 3))
    await hot.publish("wf-h", run(2, 4))
    assert seqs((await hot.read("wf-h", 1, limit=10)).events) == [1, 2, 3, 4]


async def test_a_missing_batch_never_leaves_a_hole() -> None:
    hot = MemoryHotTier()
    await hot.publish("wf-h", run(1, 3))
    await hot.publish("wf-h", run(6, 7))  # 4 and 5 never arrived
    window = await hot.read("wf-h", 1, limit=10)
    assert window.first_seq == 6
    assert seqs(window.events) == [6, 7]


async def test_wait_returns_at_once_when_already_held() -> None:
    hot = MemoryHotTier()
    await hot.publish("wf-h", run(1, 2))
    await hot.wait("wf-h", 1)


async def test_wait_wakes_on_publish() -> None:
    hot = MemoryHotTier()
    await hot.publish("wf-h", run(1, 2))
    waiter = asyncio.create_task(hot.wait("wf-h", 2))
    await asyncio.sleep(0)
    assert not waiter.done()
    await hot.publish("wf-h", run(3, 3))
    await waiter


async def test_idle_buffers_are_evicted_after_the_ttl() -> None:
    clock = FakeClock()
    hot = MemoryHotTier(clock=clock)
    await hot.publish("wf-old", [stored(1, workflow_id="wf-old")])
    clock.now += DEFAULT_TTL_SECONDS / 2
    await hot.publish("wf-new", [stored(1, workflow_id="wf-new")])
    clock.now += DEFAULT_TTL_SECONDS / 2
    assert hot.sweep() == 1
    assert hot.held("wf-old") == 0
    assert hot.held("wf-new") == 1


async def test_buffers_with_waiters_are_not_evicted() -> None:
    clock = FakeClock()
    hot = MemoryHotTier(clock=clock)
    await hot.publish("wf-h", run(1, 1))
    waiter = asyncio.create_task(hot.wait("wf-h", 1))
    await asyncio.sleep(0)
    clock.now += DEFAULT_TTL_SECONDS * 2
    assert hot.sweep() == 0
    await hot.publish("wf-h", run(2, 2))
    await waiter


async def test_buffers_with_readers_busy_elsewhere_are_not_evicted() -> None:
    clock = FakeClock()
    hot = MemoryHotTier(clock=clock)
    await hot.publish("wf-h", run(1, 1))
    with hot.reading("wf-h"):  # a reader between wake-ups: not waiting, still following
        clock.now += DEFAULT_TTL_SECONDS * 2
        assert hot.sweep() == 0
    assert hot.sweep() == 1


async def test_a_reader_paces_itself_only_while_a_wake_up_is_held() -> None:
    hot = MemoryHotTier(seconds_per_reader=1.0)
    await hot.pace("wf-unknown")  # nothing held for an unknown workflow: at once
    with hot.reading("wf-h"), hot.reading("wf-h"):
        await hot.publish("wf-h", run(1, 1))  # the first change wakes at once
        await hot.pace("wf-h")
        await hot.publish("wf-h", run(2, 2))  # the next one is held for the crowd
        paced = asyncio.create_task(hot.pace("wf-h"))
        await asyncio.sleep(0)
        assert not paced.done()
        await hot.forget("wf-h")  # wakes at once
        await paced


async def test_publish_sweeps_now_and_then() -> None:
    clock = FakeClock()
    hot = MemoryHotTier(ttl_seconds=10.0, clock=clock)
    await hot.publish("wf-a", [stored(1, workflow_id="wf-a")])
    clock.now += 3600.0
    await hot.publish("wf-b", [stored(1, workflow_id="wf-b")])
    assert hot.held("wf-a") == 0


def test_max_events_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_events"):
        MemoryHotTier(max_events=0)


async def test_last_seq_is_the_newest_held_and_zero_for_an_unknown_workflow() -> None:
    hot = MemoryHotTier(max_events=3)
    assert hot.last_seq("wf-h") == 0
    await hot.publish("wf-h", run(1, 5))
    assert hot.last_seq("wf-h") == 5
    await hot.publish("wf-h", run(4, 5))  # a repeat changes nothing
    assert hot.last_seq("wf-h") == 5
