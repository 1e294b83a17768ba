"""Readers racing appends: a new subscriber reads SQL while events are being committed and
published, on one replica and across replicas sharing a hot tier."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence

from services.events.hot import HotWindow, MemoryHotTier
from services.events.log import EventLog
from services.events.records import StoredEvent
from services.events.store import SqlEventStore
from tests.support.databases import EngineMaker

from .helpers import new, seqs
from .test_log import FINISH, Subscriber, make


class StaleFirstRead(MemoryHotTier):
    """The real hot tier, except that appends land right after its first empty answer:
    the moment a subscriber has seen "nothing hot" but not yet read SQL."""

    def __init__(self) -> None:
        super().__init__()
        self.event_log: EventLog | None = None
        self.raced = False

    async def read(
        self, workflow_id: str, from_seq: int, limit: int, types: Collection[str] | None = None
    ) -> HotWindow:
        window = await super().read(workflow_id, from_seq, limit, types)
        if window.first_seq is None and not self.raced and self.event_log is not None:
            self.raced = True
            await self.event_log.append(workflow_id, "t1", [new("LLM_PROMPT"), new("PROGRESS")])
        return window


async def test_events_published_while_a_new_subscriber_reads_sql_are_not_skipped(
    store: SqlEventStore,
) -> None:
    hot = StaleFirstRead()
    event_log = EventLog(store, hot)
    hot.event_log = event_log
    await make(event_log)
    subscriber = Subscriber(event_log.stream("wf-1", "t1"))
    # One at a time, so a skipped event fails the test instead of leaving it waiting.
    assert [(e.seq, e.type) for e in await subscriber.take(1)] == [(1, "LLM_PROMPT")]
    assert [(e.seq, e.type) for e in await subscriber.take(1)] == [(2, "PROGRESS")]
    assert hot.raced
    await event_log.append("wf-1", "t1", FINISH)
    assert seqs(await subscriber.take(2)) == [3, 4]
    await subscriber.task


class HeldPublishes(MemoryHotTier):
    """The real hot tier, except that publishes wait until the test lets them through: the
    moment a commit is in SQL and its events are not yet hot."""

    def __init__(self) -> None:
        super().__init__()
        self.released = asyncio.Event()
        self.waiting = asyncio.Event()

    async def publish(self, workflow_id: str, events: Sequence[StoredEvent]) -> None:
        self.waiting.set()
        await self.released.wait()
        await super().publish(workflow_id, events)


RUN_WITH_A_DELTA = [new("PROGRESS"), new("THREAD_MESSAGE_DELTA"), new("PROGRESS"), *FINISH]


async def test_a_reader_between_a_commit_and_its_publish_waits_for_the_ephemeral_events(
    store: SqlEventStore,
) -> None:
    hot = HeldPublishes()
    event_log = EventLog(store, hot)
    await make(event_log)
    appending = asyncio.create_task(event_log.append("wf-1", "t1", RUN_WITH_A_DELTA))
    await hot.waiting.wait()  # committed: SQL holds 1, 3, 4, 5; the hot tier nothing yet
    subscriber = Subscriber(event_log.stream("wf-1", "t1"))
    assert seqs(await subscriber.take(1)) == [1]
    hot.released.set()
    assert [(e.seq, e.type) for e in await subscriber.take(1)] == [(2, "THREAD_MESSAGE_DELTA")]
    assert seqs(await subscriber.take(3)) == [3, 4, 5]
    await asyncio.gather(appending, subscriber.task)


async def test_a_replica_reading_another_ones_fresh_commit_waits_for_its_publish(
    engines: EngineMaker,
) -> None:
    """Two replicas over one database and one shared hot tier (as Redis is): the reader's
    replica has nothing in flight, yet the commit it reads is too fresh to have lost its
    ephemeral events."""
    shared = HeldPublishes()
    writer = EventLog(SqlEventStore(engines()), shared)
    reader = EventLog(SqlEventStore(engines()), shared, poll_seconds=30.0)
    await make(writer)
    appending = asyncio.create_task(writer.append("wf-1", "t1", RUN_WITH_A_DELTA))
    await shared.waiting.wait()
    subscriber = Subscriber(reader.stream("wf-1", "t1"))
    assert seqs(await subscriber.take(1)) == [1]
    shared.released.set()
    assert [(e.seq, e.type) for e in await subscriber.take(1)] == [(2, "THREAD_MESSAGE_DELTA")]
    assert seqs(await subscriber.take(3)) == [3, 4, 5]
    await asyncio.gather(appending, subscriber.task)
