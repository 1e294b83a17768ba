"""MemoryHotTier's byte bounds: what goes first, and what readers see after an eviction."""

from __future__ import annotations

import asyncio
import json

from services.events.hot import MemoryHotTier
from services.events.log import EventLog
from services.events.records import StoredEvent
from services.events.sizes import held_bytes
from services.events.store import SqlEventStore

from .helpers import collect, new, seqs, stored

# Every event of these tests (seqs 1-9) has the same size, so bounds are counted in events.
PAYLOAD = json.dumps({"text": "x" * 1000})


def event(seq: int, workflow_id: str, kind: str = "PROGRESS") -> StoredEvent:
    return stored(seq, kind, workflow_id, payload_json=PAYLOAD)


def run(workflow_id: str, first: int, last: int) -> list[StoredEvent]:
    return [event(seq, workflow_id) for seq in range(first, last + 1)]


SIZE = held_bytes(event(1, "wf-a"))


async def held(hot: MemoryHotTier, workflow_id: str) -> list[int]:
    return seqs((await hot.read(workflow_id, 1, 1000)).events)


async def test_the_workflow_bound_evicts_that_workflows_oldest_events() -> None:
    hot = MemoryHotTier(max_workflow_bytes=3 * SIZE, max_bytes=100 * SIZE)
    await hot.publish("wf-b", run("wf-b", 1, 2))
    await hot.publish("wf-a", run("wf-a", 1, 2))
    await hot.publish("wf-a", run("wf-a", 3, 5))
    assert await held(hot, "wf-a") == [3, 4, 5]
    assert await held(hot, "wf-b") == [1, 2]  # another workflow keeps its events
    assert hot.held_bytes("wf-a") == 3 * SIZE
    assert hot.bytes == 5 * SIZE


async def test_the_total_bound_evicts_the_least_recently_appended_workflows_first() -> None:
    hot = MemoryHotTier(max_workflow_bytes=100 * SIZE, max_bytes=6 * SIZE)
    await hot.publish("wf-a", run("wf-a", 1, 2))
    await hot.publish("wf-b", run("wf-b", 1, 2))
    await hot.publish("wf-c", run("wf-c", 1, 2))
    await hot.publish("wf-a", run("wf-a", 3, 3))  # wf-a is now the most recent
    # One event over: wf-b's oldest goes, as wf-b is now the least recently appended to.
    assert (await held(hot, "wf-a"), await held(hot, "wf-b")) == ([1, 2, 3], [2])
    await hot.publish("wf-c", run("wf-c", 3, 4))
    # Two over: wf-b's last, then wf-a's oldest (wf-a before wf-c in recency).
    assert await held(hot, "wf-b") == []
    assert await held(hot, "wf-a") == [2, 3]
    assert await held(hot, "wf-c") == [1, 2, 3, 4]
    assert hot.bytes == 6 * SIZE


async def test_one_workflow_alone_past_the_total_bound_keeps_its_newest() -> None:
    hot = MemoryHotTier(max_workflow_bytes=100 * SIZE, max_bytes=4 * SIZE)
    await hot.publish("wf-a", run("wf-a", 1, 9))
    assert await held(hot, "wf-a") == [6, 7, 8, 9]


async def test_an_event_larger_than_the_bound_is_evicted_and_its_seq_remembered() -> None:
    hot = MemoryHotTier(max_workflow_bytes=SIZE - 1)
    await hot.publish("wf-a", run("wf-a", 1, 2))
    window = await hot.read("wf-a", 1, 10)
    assert window.events == []
    # Nothing held, but everything after seq 2 would be: seqs 1-2 are read from SQL.
    assert window.first_seq == 3 and not window.covers(2) and window.covers(3)
    assert hot.bytes == 0
    # A reader at seq 3 waits for seq 3 rather than spinning over the evicted range.
    waiting = asyncio.create_task(hot.wait("wf-a", 2))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await hot.publish("wf-a", [stored(3, "PROGRESS", "wf-a")])
    await asyncio.wait_for(waiting, 10)
    assert await held(hot, "wf-a") == [3]
    # A repeat of an evicted seq is not taken back.
    await hot.publish("wf-a", run("wf-a", 2, 2))
    assert await held(hot, "wf-a") == [3]


async def test_forget_and_sweep_give_back_what_a_workflow_held() -> None:
    now = [1000.0]
    hot = MemoryHotTier(ttl_seconds=10, clock=lambda: now[0])
    await hot.publish("wf-a", run("wf-a", 1, 3))
    await hot.publish("wf-b", run("wf-b", 1, 2))
    assert hot.bytes == 5 * SIZE
    await hot.forget("wf-a")
    assert hot.bytes == 2 * SIZE
    now[0] += 11
    assert hot.sweep() == 1
    assert hot.bytes == 0
    # A new publish after the sweep is counted afresh.
    await hot.publish("wf-b", run("wf-b", 3, 3))
    assert hot.bytes == SIZE


async def test_a_hole_drops_what_was_held_from_the_count() -> None:
    hot = MemoryHotTier()
    await hot.publish("wf-a", run("wf-a", 1, 3))
    await hot.publish("wf-a", run("wf-a", 6, 7) + run("wf-a", 9, 9))  # 4-5 and 8 missing
    assert await held(hot, "wf-a") == [9]
    assert hot.bytes == hot.held_bytes("wf-a") == SIZE


async def test_replay_and_live_tail_after_eviction_lose_no_durable_event(
    store: SqlEventStore,
) -> None:
    """Large ephemeral events push everything out of a small tier; durable events come from
    SQL, in order and without a repeat, and the evicted ephemeral ones are simply gone."""
    hot = MemoryHotTier(max_workflow_bytes=3 * SIZE, max_bytes=5 * SIZE)
    event_log = EventLog(store, hot, replay_page=4)
    workflow = await event_log.create_workflow(tenant_id="t1")
    wf = workflow.workflow_id
    durable: list[int] = []
    for round_ in range(6):
        appended = await event_log.append(
            wf,
            "t1",
            [
                new("PROGRESS", {"round": round_}),
                *(new("THREAD_MESSAGE_DELTA", {"delta": "y" * 1000}) for _ in range(3)),
            ],
        )
        durable.append(appended[0])
    replayed = []
    async for item in event_log.stream(wf, "t1", types=["PROGRESS"]):
        replayed.append(item)
        if len(replayed) == len(durable):
            break
    assert seqs(replayed) == durable
    # Live: the tail picks up the next events, the ephemeral one included, without a gap.
    tail = asyncio.create_task(collect(event_log.stream(wf, "t1", from_seq=durable[-1] + 1)))
    await asyncio.sleep(0.05)
    more = await event_log.append(
        wf, "t1", [new("THREAD_MESSAGE_DELTA", {"delta": "z"}), new("WORKFLOW_COMPLETED", {})]
    )
    streamed = await asyncio.wait_for(tail, 10)
    assert seqs(streamed)[-3:] == [*more, more[-1] + 1]
    assert [e.type for e in streamed][-3:] == [
        "THREAD_MESSAGE_DELTA",
        "WORKFLOW_COMPLETED",
        "STREAM_END",
    ]
    # The whole log, replayed once more: every durable event once, in order, and of the
    # ephemeral ones only those still held, after every evicted seq.
    whole = await collect(event_log.stream(wf, "t1"))
    assert [e.seq for e in whole if not e.ephemeral] == [*durable, more[1], more[1] + 1]
    assert seqs(whole) == sorted(set(seqs(whole)))
    assert [e.seq for e in whole if e.ephemeral] == [
        e.seq for e in (await hot.read(wf, 1, 1000)).events if e.ephemeral
    ]
