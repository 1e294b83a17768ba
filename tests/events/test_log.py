"""EventLog: concurrent appends, replay from hot tier or SQL, live tail, history pages."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.events.errors import NotFound
from services.events.hot import MemoryHotTier
from services.events.log import EventLog
from services.events.payloads import STREAM_RESULT_LIMIT
from services.events.records import NewEvent, StoredEvent
from services.events.store import SqlEventStore

from .helpers import collect, new, progress, seqs

FINISH = [new("WORKFLOW_COMPLETED", {"result": "done"}), new("STREAM_END")]


async def make(event_log: EventLog, workflow_id: str = "wf-1", tenant: str = "t1") -> str:
    record = await event_log.create_workflow(tenant_id=tenant, workflow_id=workflow_id)
    return record.workflow_id


class Subscriber:
    """Streams in a background task, handing each event to the test through a queue."""

    def __init__(self, events: AsyncIterator[StoredEvent]) -> None:
        self.queue: asyncio.Queue[StoredEvent] = asyncio.Queue()
        self.task = asyncio.create_task(self._run(events))

    async def _run(self, events: AsyncIterator[StoredEvent]) -> None:
        async for event in events:
            self.queue.put_nowait(event)

    async def take(self, count: int) -> list[StoredEvent]:
        return [await self.queue.get() for _ in range(count)]


async def test_created_workflow_gets_a_generated_id(event_log: EventLog) -> None:
    record = await event_log.create_workflow(tenant_id="t1", query="hi")
    assert record.workflow_id.startswith("wf-")
    assert (await event_log.get_workflow(record.workflow_id, "t1")).query == "hi"


async def test_twenty_concurrent_appenders_get_exactly_one_to_n(event_log: EventLog) -> None:
    await make(event_log)

    async def appender(index: int) -> list[list[int]]:
        return [
            await event_log.append("wf-1", "t1", progress(1 + (index + n) % 4)) for n in range(5)
        ]

    results = await asyncio.gather(*(appender(i) for i in range(20)))
    batches = [batch for result in results for batch in result]
    for batch in batches:
        assert batch == list(range(batch[0], batch[0] + len(batch)))
    everything = sorted(seq for batch in batches for seq in batch)
    assert everything == list(range(1, len(everything) + 1))
    page = await event_log.list_events("wf-1", "t1", limit=1000)
    assert seqs(page.events) == everything


async def test_late_subscriber_gets_everything_then_live_until_stream_end(
    event_log: EventLog,
) -> None:
    await make(event_log)
    await event_log.append("wf-1", "t1", [new("WORKFLOW_STARTED"), *progress(3)])
    subscriber = Subscriber(event_log.stream("wf-1", "t1"))
    assert seqs(await subscriber.take(4)) == [1, 2, 3, 4]
    await event_log.append("wf-1", "t1", progress(2))
    assert seqs(await subscriber.take(2)) == [5, 6]
    await event_log.append("wf-1", "t1", FINISH)
    assert [e.type for e in await subscriber.take(2)] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    await subscriber.task  # the stream ends by itself after STREAM_END
    assert subscriber.queue.empty()


async def test_subscriber_from_the_middle(event_log: EventLog) -> None:
    await make(event_log)
    await event_log.append("wf-1", "t1", [*progress(6), *FINISH])
    assert seqs(await collect(event_log.stream("wf-1", "t1", from_seq=4))) == [4, 5, 6, 7, 8]


async def test_stream_of_a_finished_log_read_past_its_end_is_empty(event_log: EventLog) -> None:
    await make(event_log)
    await event_log.append("wf-1", "t1", FINISH)
    assert await collect(event_log.stream("wf-1", "t1", from_seq=3)) == []
    assert seqs(await collect(event_log.stream("wf-1", "t1", from_seq=2))) == [2]


async def test_ephemeral_events_are_replayed_from_the_hot_tier(event_log: EventLog) -> None:
    await make(event_log)
    await event_log.append(
        "wf-1",
        "t1",
        [
            new("THREAD_MESSAGE_DELTA", {"delta": "4"}),
            new("THREAD_MESSAGE_DELTA", {"delta": "2"}),
            new("THREAD_MESSAGE_COMPLETED", {"content": "42"}),
            *FINISH,
        ],
    )
    replay = await collect(event_log.stream("wf-1", "t1"))
    assert [e.type for e in replay] == [
        "THREAD_MESSAGE_DELTA",
        "THREAD_MESSAGE_DELTA",
        "THREAD_MESSAGE_COMPLETED",
        "WORKFLOW_COMPLETED",
        "STREAM_END",
    ]
    page = await event_log.list_events("wf-1", "t1", types=["THREAD_MESSAGE_DELTA"])
    assert seqs(page.events) == [1, 2]


async def test_types_filter_still_delivers_stream_end(event_log: EventLog) -> None:
    await make(event_log)
    await event_log.append(
        "wf-1", "t1", [new("TOOL_INVOKED"), *progress(2), new("TOOL_OBSERVATION"), *FINISH]
    )
    events = await collect(
        event_log.stream("wf-1", "t1", types=["TOOL_INVOKED", "TOOL_OBSERVATION"])
    )
    assert [(e.seq, e.type) for e in events] == [
        (1, "TOOL_INVOKED"),
        (4, "TOOL_OBSERVATION"),
        (6, "STREAM_END"),
    ]


async def test_resume_has_no_gap_or_repeat_while_appends_race(event_log: EventLog) -> None:
    await make(event_log)
    batches = 40

    async def producer() -> None:
        for n in range(batches):
            await event_log.append("wf-1", "t1", progress(1 + n % 3))
            await asyncio.sleep(0)
        await event_log.append("wf-1", "t1", FINISH)

    producing = asyncio.create_task(producer())
    first: list[StoredEvent] = []
    async for event in event_log.stream("wf-1", "t1"):
        first.append(event)
        if len(first) == 15:
            break  # the client drops mid-run
    resumed = await collect(event_log.stream("wf-1", "t1", from_seq=first[-1].seq + 1))
    await producing
    combined = seqs(first) + seqs(resumed)
    total = (await event_log.get_workflow("wf-1", "t1")).last_seq
    assert combined == list(range(1, total + 1))
    assert resumed[-1].type == "STREAM_END"


async def test_switch_from_sql_to_hot_tier_while_appends_race(store: SqlEventStore) -> None:
    """A tiny hot tier forces the replay through SQL and back, racing the producer."""
    event_log = EventLog(store, MemoryHotTier(max_events=5), replay_page=4)
    await make(event_log)
    await event_log.append("wf-1", "t1", progress(30))

    async def producer() -> None:
        for _ in range(25):
            await event_log.append("wf-1", "t1", progress(2))
            await asyncio.sleep(0)
        await event_log.append("wf-1", "t1", FINISH)

    producing = asyncio.create_task(producer())
    events = await collect(event_log.stream("wf-1", "t1"))
    await producing
    assert seqs(events) == list(range(1, 30 + 50 + 2 + 1))


async def crowd_reading_a_busy_log(store: SqlEventStore, seconds_per_reader: float) -> list[int]:
    """Twenty readers follow a log while 60 appends come one after another; each must get
    every event in order. Returns how many batches each reader was handed."""
    event_log = EventLog(store, MemoryHotTier(seconds_per_reader=seconds_per_reader))
    workflow_id = await make(event_log, workflow_id=f"wf-crowd-{seconds_per_reader}")
    await event_log.append(workflow_id, "t1", progress(1))
    readers = [event_log.stream_batches(workflow_id, "t1") for _ in range(20)]

    async def read(batches: AsyncIterator[list[StoredEvent]]) -> tuple[list[int], int]:
        got: list[int] = []
        count = 0
        async for batch in batches:
            got.extend(seqs(batch))
            count += 1
        return got, count

    reading = [asyncio.create_task(read(batches)) for batches in readers]
    await asyncio.sleep(0.05)  # every reader is at the head, waiting
    for _ in range(60):
        await event_log.append(workflow_id, "t1", progress(1))
    await event_log.append(workflow_id, "t1", FINISH)
    results = await asyncio.gather(*reading)
    for got, _ in results:
        assert got == list(range(1, 1 + 1 + 60 + 2))
    return [count for _, count in results]


async def test_a_crowd_of_readers_takes_a_busy_log_in_fewer_batches(store: SqlEventStore) -> None:
    # 20 readers at 5 ms each: one wake-up per 0.1 s at most while appends keep coming.
    paced = await crowd_reading_a_busy_log(store, seconds_per_reader=0.005)
    unpaced = await crowd_reading_a_busy_log(store, seconds_per_reader=0.0)
    assert max(paced) < min(unpaced)


async def test_a_live_reader_of_a_deleted_workflow_ends_with_not_found(
    event_log: EventLog,
) -> None:
    await make(event_log)
    await event_log.append("wf-1", "t1", progress(2))
    reader = Subscriber(event_log.stream("wf-1", "t1"))
    assert seqs(await reader.take(2)) == [1, 2]
    await asyncio.sleep(0.01)  # the reader waits for news
    assert await event_log.delete_workflows("t1", ["wf-1"]) == (["wf-1"], 2)
    with pytest.raises(NotFound):
        await asyncio.wait_for(reader.task, timeout=10)


async def test_trimmed_hot_tier_replays_durable_events_from_sql(store: SqlEventStore) -> None:
    event_log = EventLog(store, MemoryHotTier(max_events=3))
    await make(event_log)
    await event_log.append(
        "wf-1",
        "t1",
        [new("LLM_PARTIAL"), new("PROGRESS"), new("LLM_PARTIAL"), *progress(3), *FINISH],
    )
    # Seqs 1-5 are out of the hot tier; of them only the durable 2, 4 and 5 survive.
    assert seqs(await collect(event_log.stream("wf-1", "t1"))) == [2, 4, 5, 6, 7, 8]


async def test_restarted_log_replays_from_sql_and_keeps_numbering(
    store: SqlEventStore, engine: AsyncEngine
) -> None:
    before = EventLog(store, MemoryHotTier())
    await make(before)
    await before.append("wf-1", "t1", [new("WORKFLOW_STARTED"), new("LLM_PARTIAL"), *progress(2)])

    after = EventLog(SqlEventStore(engine), MemoryHotTier())  # new objects, empty hot tier
    subscriber = Subscriber(after.stream("wf-1", "t1"))
    assert seqs(await subscriber.take(3)) == [1, 3, 4]  # the ephemeral 2 died with the process
    assert await after.append("wf-1", "t1", progress(1)) == [5]
    assert seqs(await subscriber.take(1)) == [5]
    await after.append("wf-1", "t1", FINISH)
    assert seqs(await subscriber.take(2)) == [6, 7]
    await subscriber.task


async def test_restarted_log_waits_past_lost_ephemeral_tail(
    store: SqlEventStore, engine: AsyncEngine
) -> None:
    before = EventLog(store, MemoryHotTier())
    await make(before)
    await before.append("wf-1", "t1", [*progress(1), new("LLM_PARTIAL")])
    after = EventLog(SqlEventStore(engine), MemoryHotTier())
    subscriber = Subscriber(after.stream("wf-1", "t1"))
    assert seqs(await subscriber.take(1)) == [1]
    await after.append("wf-1", "t1", FINISH)
    assert seqs(await subscriber.take(2)) == [3, 4]
    await subscriber.task


async def test_list_pages_merge_durable_and_hot_events(event_log: EventLog) -> None:
    await make(event_log)
    await event_log.append(
        "wf-1", "t1", [new("PROGRESS"), new("LLM_PARTIAL"), new("PROGRESS"), new("LLM_PARTIAL")]
    )
    await event_log.append("wf-1", "t1", progress(1))
    first = await event_log.list_events("wf-1", "t1", limit=2)
    assert (seqs(first.events), first.next_seq) == ([1, 2], 3)
    second = await event_log.list_events("wf-1", "t1", from_seq=first.next_seq, limit=2)
    assert (seqs(second.events), second.next_seq) == ([3, 4], 5)
    last = await event_log.list_events("wf-1", "t1", from_seq=second.next_seq, limit=2)
    assert (seqs(last.events), last.next_seq) == ([5], 0)
    exact = await event_log.list_events("wf-1", "t1", limit=5)
    assert (len(exact.events), exact.next_seq) == (5, 0)


async def test_list_defaults_to_a_hundred(event_log: EventLog) -> None:
    await make(event_log)
    await event_log.append("wf-1", "t1", progress(150))
    page = await event_log.list_events("wf-1", "t1")
    assert (len(page.events), page.next_seq) == (100, 101)


async def test_list_after_restart_has_durable_history(
    store: SqlEventStore, engine: AsyncEngine
) -> None:
    before = EventLog(store, MemoryHotTier())
    await make(before)
    await before.append("wf-1", "t1", [new("PROGRESS"), new("LLM_PARTIAL"), *FINISH])
    after = EventLog(SqlEventStore(engine), MemoryHotTier())
    page = await after.list_events("wf-1", "t1")
    assert (seqs(page.events), page.next_seq) == ([1, 3, 4], 0)


async def test_nul_characters_are_stored_as_replacement_characters_everywhere(
    event_log: EventLog,
) -> None:
    # PostgreSQL refuses NUL in text, and one refused row fails its whole batch; SQLite
    # takes it. Both store U+FFFD, and the live stream matches what a replay reads.
    await event_log.create_workflow(tenant_id="t1", workflow_id="wf-1", query="q\x00")
    subscriber = Subscriber(event_log.stream("wf-1", "t1"))
    result = "r\x00" + "x" * STREAM_RESULT_LIMIT
    await event_log.append(
        "wf-1",
        "t1",
        [
            NewEvent("PROGRESS", agent_id="agent\x00", message="m\x00"),
            NewEvent(
                "TOOL_OBSERVATION",
                payload_json=json.dumps({"tool_name": "read\x00", "result": result}),
            ),
            NewEvent("WORKFLOW_COMPLETED", payload_json=json.dumps({"result": "done\x00"})),
            NewEvent("STREAM_END"),
        ],
    )
    live = await subscriber.take(4)
    replay = (await event_log.list_events("wf-1", "t1")).events
    assert live == list(replay)
    assert (replay[0].agent_id, replay[0].message) == ("agent\ufffd", "m\ufffd")
    (whole,) = (await event_log.list_events("wf-1", "t1", 2, 1, full_results=True)).events
    assert json.loads(whole.payload_json)["result"] == result.replace("\x00", "\ufffd")
    workflow = await event_log.get_workflow("wf-1", "t1")
    assert (workflow.query, workflow.result) == ("q\ufffd", "done\ufffd")
