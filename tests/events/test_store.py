"""SqlEventStore against a real SQLite file: seq counter, durable tier, lifecycle, tenancy."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from services.events.errors import AlreadyExists, FailedPrecondition, NotFound
from services.events.models import events
from services.events.records import NewEvent, StoredEvent, WorkflowStatus
from services.events.store import SqlEventStore
from tests.support.databases import EngineMaker

from .helpers import new, progress, seqs


async def listed(
    store: SqlEventStore,
    workflow_id: str,
    tenant_id: str,
    *,
    from_seq: int = 1,
    to_seq: int | None = None,
    limit: int = 100,
    types: set[str] | None = None,
) -> list[StoredEvent]:
    """A page of durable events with no byte bound to stop it."""
    page = await store.events_page(
        workflow_id,
        tenant_id,
        from_seq=from_seq,
        to_seq=to_seq,
        limit=limit,
        types=types,
        max_bytes=2**62,
    )
    return page.events


async def test_seqs_run_from_one_without_gaps_and_batches_are_consecutive(
    store: SqlEventStore,
) -> None:
    await store.create_workflow(workflow_id="wf-a", tenant_id="t1")
    first = await store.append("wf-a", "t1", progress(3))
    second = await store.append("wf-a", "t1", progress(1))
    third = await store.append("wf-a", "t1", progress(4))
    assert [seqs(first), seqs(second), seqs(third)] == [[1, 2, 3], [4], [5, 6, 7, 8]]
    record = await store.get_workflow("wf-a", "t1")
    assert record.last_seq == 8
    assert seqs(await listed(store, "wf-a", "t1", limit=100)) == list(range(1, 9))


async def test_two_workflows_number_independently(store: SqlEventStore) -> None:
    await store.create_workflow(workflow_id="wf-a", tenant_id="t1")
    await store.create_workflow(workflow_id="wf-b", tenant_id="t1")
    a1 = await store.append("wf-a", "t1", progress(2))
    b1 = await store.append("wf-b", "t1", progress(3))
    a2 = await store.append("wf-a", "t1", progress(1))
    assert seqs(a1) == [1, 2]
    assert seqs(b1) == [1, 2, 3]
    assert seqs(a2) == [3]


async def test_ephemeral_events_take_seqs_but_are_not_stored(
    store: SqlEventStore, engine: AsyncEngine
) -> None:
    await store.create_workflow(workflow_id="wf-e", tenant_id="t1")
    batch = [
        new("AGENT_THINKING"),
        new("LLM_PROMPT", {"prompt_length": 10}),
        new("LLM_PARTIAL", {"chunk": "Hel"}),
        new("THREAD_MESSAGE_DELTA", {"delta": "lo"}),
        new("THREAD_MESSAGE_COMPLETED", {"content": "Hello"}),
    ]
    stored = (await store.append("wf-e", "t1", batch)).events
    assert seqs(stored) == [1, 2, 3, 4, 5]
    assert [e.ephemeral for e in stored] == [False, True, True, True, False]
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(events.c.seq, events.c.type).where(events.c.workflow_id == "wf-e")
            )
        ).all()
    assert [tuple(row) for row in rows] == [(1, "AGENT_THINKING"), (5, "THREAD_MESSAGE_COMPLETED")]
    assert (await store.get_workflow("wf-e", "t1")).last_seq == 5


async def test_event_fields_round_trip_with_utc_timestamps(store: SqlEventStore) -> None:
    await store.create_workflow(workflow_id="wf-r", tenant_id="t1")
    moment = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    event = NewEvent(
        type="TOOL_INVOKED",
        agent_id="agent-7",
        message="calculator: 12*7",
        payload_json='{"n": 12345678901234567890}',
        timestamp=moment,
        trace_id="abc123",
    )
    await store.append("wf-r", "t1", [event, new("PROGRESS")])
    stored = await listed(store, "wf-r", "t1")
    assert stored[0].timestamp == moment
    assert stored[0].payload_json == '{"n": 12345678901234567890}'  # kept verbatim
    assert (stored[0].agent_id, stored[0].message, stored[0].trace_id) == (
        "agent-7",
        "calculator: 12*7",
        "abc123",
    )
    # No timestamp given: stamped by the store, in UTC.
    assert stored[1].timestamp.tzinfo is not None
    assert stored[1].timestamp.utcoffset() == UTC.utcoffset(None)
    assert stored[1].payload_json == "{}"


async def test_pages_filter_by_range_and_type(store: SqlEventStore) -> None:
    await store.create_workflow(workflow_id="wf-l", tenant_id="t1")
    await store.append(
        "wf-l",
        "t1",
        [new("WORKFLOW_STARTED"), new("TOOL_INVOKED"), new("PROGRESS"), new("TOOL_INVOKED")],
    )
    tools = await listed(store, "wf-l", "t1", types={"TOOL_INVOKED"})
    assert seqs(tools) == [2, 4]
    window = await listed(store, "wf-l", "t1", from_seq=2, to_seq=3)
    assert seqs(window) == [2, 3]


async def test_status_follows_lifecycle_events(store: SqlEventStore) -> None:
    await store.create_workflow(workflow_id="wf-s", tenant_id="t1")
    assert (await store.get_workflow("wf-s", "t1")).status is WorkflowStatus.PENDING
    steps = [
        ("WORKFLOW_STARTED", WorkflowStatus.RUNNING),
        ("WORKFLOW_PAUSING", WorkflowStatus.RUNNING),
        ("WORKFLOW_PAUSED", WorkflowStatus.PAUSED),
        ("WORKFLOW_RESUMED", WorkflowStatus.RUNNING),
        ("ERROR_OCCURRED", WorkflowStatus.RUNNING),  # not fatal: only a report
    ]
    for kind, expected in steps:
        await store.append("wf-s", "t1", [new(kind)])
        assert (await store.get_workflow("wf-s", "t1")).status is expected, kind


async def test_completed_stores_result_usage_and_duration(store: SqlEventStore) -> None:
    await store.create_workflow(
        workflow_id="wf-c", tenant_id="t1", owner="alice", query="12*7?", session_id="s-1"
    )
    await store.append(
        "wf-c",
        "t1",
        [
            new("WORKFLOW_STARTED"),
            new(
                "WORKFLOW_COMPLETED",
                {
                    "result": "84",
                    "duration_ms": 1234,
                    "total_tokens": 321,
                    "total_cost_usd": 0.0042,
                    "agents_used": 1,
                    "tools_invoked": 1,
                },
            ),
            new("STREAM_END"),
        ],
    )
    record = await store.get_workflow("wf-c", "t1")
    assert record.status is WorkflowStatus.COMPLETED
    assert (record.result, record.duration_ms) == ("84", 1234)
    assert (record.usage.total_tokens, record.usage.cost_usd) == (321, 0.0042)
    assert (record.owner, record.query, record.session_id) == ("alice", "12*7?", "s-1")
    assert record.stream_ended
    assert record.updated_at >= record.created_at


async def test_fatal_error_fails_the_workflow_with_its_message(store: SqlEventStore) -> None:
    await store.create_workflow(workflow_id="wf-f", tenant_id="t1")
    await store.append(
        "wf-f",
        "t1",
        [
            new("WORKFLOW_STARTED"),
            new("ERROR_OCCURRED", {"error_message": "provider down", "fatal": True}),
        ],
    )
    record = await store.get_workflow("wf-f", "t1")
    assert record.status is WorkflowStatus.FAILED
    assert record.error == "provider down"
    # A finished workflow stays finished whatever a late producer reports.
    await store.append("wf-f", "t1", [new("WORKFLOW_RESUMED")])
    assert (await store.get_workflow("wf-f", "t1")).status is WorkflowStatus.FAILED


async def test_cancelled_is_terminal(store: SqlEventStore) -> None:
    await store.create_workflow(workflow_id="wf-x", tenant_id="t1")
    await store.append("wf-x", "t1", [new("WORKFLOW_STARTED"), new("WORKFLOW_CANCELLED")])
    assert (await store.get_workflow("wf-x", "t1")).status is WorkflowStatus.CANCELLED


async def test_append_after_stream_end_is_refused_and_consumes_no_seq(
    store: SqlEventStore,
) -> None:
    await store.create_workflow(workflow_id="wf-end", tenant_id="t1")
    await store.append("wf-end", "t1", [new("WORKFLOW_CANCELLED"), new("STREAM_END")])
    with pytest.raises(FailedPrecondition, match="has ended"):
        await store.append("wf-end", "t1", progress(1))
    assert (await store.get_workflow("wf-end", "t1")).last_seq == 2


async def test_other_tenant_sees_nothing(store: SqlEventStore) -> None:
    await store.create_workflow(workflow_id="wf-t", tenant_id="t1")
    with pytest.raises(NotFound, match="'wf-t' not found"):
        await store.get_workflow("wf-t", "t2")
    with pytest.raises(NotFound, match="'wf-t' not found"):
        await store.append("wf-t", "t2", progress(1))
    with pytest.raises(NotFound, match="'wf-t' not found"):
        await listed(store, "wf-t", "t2")
    assert (await store.get_workflow("wf-t", "t1")).last_seq == 0


async def test_duplicate_workflow_id_already_exists(store: SqlEventStore) -> None:
    await store.create_workflow(workflow_id="wf-d", tenant_id="t1")
    with pytest.raises(AlreadyExists, match="'wf-d' already exists"):
        await store.create_workflow(workflow_id="wf-d", tenant_id="t2")


async def test_two_replicas_on_one_database_never_share_a_seq(
    store: SqlEventStore, engines: EngineMaker, engine: AsyncEngine
) -> None:
    """No in-process lock here: the row counter alone keeps concurrent writers gap-free."""
    other_engine = engines()
    try:
        replicas = [store, SqlEventStore(other_engine)]
        await store.create_workflow(workflow_id="wf-rep", tenant_id="t1")

        async def writer(index: int) -> list[list[int]]:
            replica = replicas[index % 2]
            return [
                seqs(await replica.append("wf-rep", "t1", progress(1 + (index + n) % 3)))
                for n in range(4)
            ]

        batches = [
            batch for result in await asyncio.gather(*map(writer, range(10))) for batch in result
        ]
    finally:
        await other_engine.dispose()
    for batch in batches:
        assert batch == list(range(batch[0], batch[0] + len(batch)))
    everything = sorted(seq for batch in batches for seq in batch)
    assert everything == list(range(1, len(everything) + 1))
    async with engine.connect() as conn:
        count = (
            await conn.execute(
                select(func.count()).select_from(events).where(events.c.workflow_id == "wf-rep")
            )
        ).scalar_one()
    assert count == len(everything)
