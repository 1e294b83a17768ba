"""History pages bounded in bytes: List pages, the SQL reads behind them and behind replays,
and a caller paging through them with next_seq."""

from __future__ import annotations

import grpc
import pytest

from services.events.hot import MemoryHotTier
from services.events.log import EventLog
from services.events.records import NewEvent, StoredEvent
from services.events.sizes import wire_bytes
from services.events.store import SqlEventStore
from shuttle.events_client.client import EventsClient
from shuttle.settings import Settings
from shuttle.workflow_log import EventDraft

from .conftest import RunningEvents
from .helpers import collect, new, seqs

KIB = 1024
MIB = 1024 * KIB


def big(size: int = MIB) -> NewEvent:
    return new("PROGRESS", {"text": "x" * size})


async def workflow_with(event_log: EventLog, *batches: list[NewEvent]) -> str:
    workflow = await event_log.create_workflow(tenant_id="t1")
    for batch in batches:
        await event_log.append(workflow.workflow_id, "t1", batch)
    return workflow.workflow_id


async def pages(
    event_log: EventLog, workflow_id: str, *, limit: int = 0, full_results: bool = False
) -> list[list[int]]:
    """The seqs of every page from the start, following next_seq."""
    found: list[list[int]] = []
    from_seq = 1
    while from_seq:
        page = await event_log.list_events(
            workflow_id, "t1", from_seq=from_seq, limit=limit, full_results=full_results
        )
        found.append(seqs(page.events))
        from_seq = page.next_seq
    return found


def total(events: list[StoredEvent]) -> int:
    return sum(wire_bytes(event) for event in events)


async def test_a_page_stops_before_its_events_pass_the_byte_bound(store: SqlEventStore) -> None:
    event_log = EventLog(store, MemoryHotTier(), list_max_bytes=int(3.5 * MIB))
    workflow_id = await workflow_with(event_log, *([big()] for _ in range(7)))
    first = await event_log.list_events(workflow_id, "t1", limit=100)
    assert seqs(first.events) == [1, 2, 3] and first.next_seq == 4
    assert total(first.events) <= 3.5 * MIB
    assert await pages(event_log, workflow_id) == [[1, 2, 3], [4, 5, 6], [7]]
    # The count still bounds a page of small events.
    assert await pages(event_log, workflow_id, limit=2) == [[1, 2], [3, 4], [5, 6], [7]]


async def test_an_event_larger_than_the_bound_comes_alone(store: SqlEventStore) -> None:
    event_log = EventLog(store, MemoryHotTier(), list_max_bytes=512 * KIB)
    workflow_id = await workflow_with(event_log, [new("PROGRESS"), big(), new("PROGRESS")])
    assert await pages(event_log, workflow_id) == [[1], [2], [3]]


async def test_whole_results_count_against_the_bound(store: SqlEventStore) -> None:
    event_log = EventLog(store, MemoryHotTier(), list_max_bytes=int(2.5 * MIB))
    observation = new("TOOL_OBSERVATION", {"tool_name": "t", "result": "r" * MIB})
    workflow_id = await workflow_with(event_log, *([observation] for _ in range(3)))
    # Cut to 2,000 characters on the stream, the three fit one page.
    assert await pages(event_log, workflow_id) == [[1, 2, 3]]
    assert await pages(event_log, workflow_id, full_results=True) == [[1, 2], [3]]
    page = await event_log.list_events(workflow_id, "t1", full_results=True)
    assert all(len(event.payload_json) > MIB for event in page.events)
    assert total(page.events) <= 2.5 * MIB


async def test_hot_events_never_skip_durable_ones_past_the_sql_page(store: SqlEventStore) -> None:
    """SQL stops at the byte bound; the hot tier, too small for the large durable events,
    holds only the ephemeral ones after them. The page must end where SQL did, not jump to
    the hot events over durable ones."""
    hot = MemoryHotTier(max_workflow_bytes=100 * KIB)
    event_log = EventLog(store, hot, list_max_bytes=int(2.5 * MIB))
    workflow_id = await workflow_with(
        event_log,
        [big(), big()],
        [big(), big()],
        [new("THREAD_MESSAGE_DELTA", {"delta": "d"}), new("THREAD_MESSAGE_DELTA", {"delta": "e"})],
    )
    assert await pages(event_log, workflow_id) == [[1, 2], [3, 4, 5, 6]]


async def test_the_sql_page_holds_only_the_rows_within_the_bound(store: SqlEventStore) -> None:
    event_log = EventLog(store, MemoryHotTier())
    workflow_id = await workflow_with(event_log, *([big()] for _ in range(6)))
    page = await store.events_page(workflow_id, "t1", limit=100, max_bytes=int(2.5 * MIB))
    assert seqs(page.events) == [1, 2] and page.cut
    page = await store.events_page(workflow_id, "t1", from_seq=5, limit=100, max_bytes=3 * MIB)
    assert seqs(page.events) == [5, 6] and not page.cut
    # Stopped by its count, not its bytes.
    page = await store.events_page(workflow_id, "t1", limit=2, max_bytes=100 * MIB)
    assert seqs(page.events) == [1, 2] and not page.cut
    page = await store.events_page(
        workflow_id, "t1", from_seq=2, to_seq=4, limit=100, max_bytes=MIB
    )
    assert seqs(page.events) == [2] and page.cut
    page = await store.events_page(
        workflow_id, "t1", limit=100, max_bytes=MIB, types=["WORKFLOW_COMPLETED"]
    )
    assert page.events == [] and not page.cut


async def test_a_replay_reads_large_durable_events_in_bounded_pages(store: SqlEventStore) -> None:
    # A tier holding nothing sends the whole replay through SQL.
    hot = MemoryHotTier(max_workflow_bytes=1)
    event_log = EventLog(store, hot, replay_page_bytes=int(2.5 * MIB))
    workflow_id = await workflow_with(
        event_log, *([big()] for _ in range(5)), [new("WORKFLOW_COMPLETED", {})]
    )
    assert seqs(await collect(event_log.stream(workflow_id, "t1"))) == [1, 2, 3, 4, 5, 6, 7]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"events_list_max_bytes": 256 * KIB})


async def test_the_events_client_pages_through_a_log_of_large_events(
    server: RunningEvents,
) -> None:
    """As the gateway and the executor page: next_seq until 0, every event once."""
    async with grpc.aio.insecure_channel(server.target) as channel:
        client = EventsClient(channel)
        workflow_id = await client.create_workflow("t1", query="q")
        for _ in range(10):
            draft = EventDraft("PROGRESS", "", {"text": "x" * (100 * KIB)})
            await client.append_once(workflow_id, "t1", [draft], name="test")
        found: list[int] = []
        sizes: list[int] = []
        from_seq = 1
        while from_seq:
            page = await client.list_events(workflow_id, "t1", from_seq=from_seq)
            found += [event.seq for event in page.events]
            sizes.append(page.ByteSize())
            from_seq = page.next_seq
    assert found == list(range(1, 11))
    assert len(sizes) == 5 and max(sizes) <= 256 * KIB
