"""EventLog rules on SQLite and PostgreSQL: idempotent retries, STREAM_END after terminal
events, the TOOL_OBSERVATION cut, and many concurrent appenders on one workflow."""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from services.events.errors import FailedPrecondition, InvalidArgument
from services.events.hot import MemoryHotTier
from services.events.log import EventLog
from services.events.models import appends, events
from services.events.store import SqlEventStore
from tests.support.databases import EngineMaker

from .helpers import collect, new, progress


async def stored_count(engine: AsyncEngine, workflow_id: str) -> int:
    async with engine.connect() as conn:
        query = select(func.count()).select_from(events).where(events.c.workflow_id == workflow_id)
        return int((await conn.execute(query)).scalar_one())


async def test_fifty_concurrent_appenders_on_two_replicas_get_exactly_one_to_n(
    engines: EngineMaker,
) -> None:
    """50 appenders, each on its own replica-like log over one of two engines, no shared lock."""
    first, second = engines(), engines()
    logs = [
        EventLog(SqlEventStore(first), MemoryHotTier()),
        EventLog(SqlEventStore(second), MemoryHotTier()),
    ]
    await logs[0].create_workflow(tenant_id="t1", workflow_id="wf-many")

    async def appender(index: int) -> list[list[int]]:
        log = logs[index % 2]
        return [await log.append("wf-many", "t1", progress(1 + (index + n) % 3)) for n in range(4)]

    results = await asyncio.gather(*(appender(i) for i in range(50)))
    batches = [batch for result in results for batch in result]
    expected_total = sum(1 + (i + n) % 3 for i in range(50) for n in range(4))
    for batch in batches:
        assert batch == list(range(batch[0], batch[0] + len(batch)))
    assert sorted(seq for batch in batches for seq in batch) == list(range(1, expected_total + 1))
    assert await stored_count(first, "wf-many") == expected_total


async def test_retry_with_same_producer_batch_returns_same_seqs_and_stores_once(
    event_log: EventLog, engine: AsyncEngine
) -> None:
    await event_log.create_workflow(tenant_id="t1", workflow_id="wf-r")
    first = await event_log.append("wf-r", "t1", progress(3), producer_id="p-1", batch_seq=1)
    again = await event_log.append("wf-r", "t1", progress(3), producer_id="p-1", batch_seq=1)
    later = await event_log.append("wf-r", "t1", progress(1), producer_id="p-1", batch_seq=2)
    assert first == again == [1, 2, 3]
    assert later == [4]
    assert await stored_count(engine, "wf-r") == 4
    assert (await event_log.get_workflow("wf-r", "t1")).last_seq == 4


async def test_same_batch_number_from_another_producer_is_a_new_batch(
    event_log: EventLog,
) -> None:
    await event_log.create_workflow(tenant_id="t1", workflow_id="wf-p")
    assert await event_log.append("wf-p", "t1", progress(1), producer_id="a", batch_seq=1) == [1]
    assert await event_log.append("wf-p", "t1", progress(1), producer_id="b", batch_seq=1) == [2]


async def test_retry_with_a_different_batch_size_is_refused(event_log: EventLog) -> None:
    await event_log.create_workflow(tenant_id="t1", workflow_id="wf-d")
    await event_log.append("wf-d", "t1", progress(2), producer_id="p", batch_seq=7)
    with pytest.raises(InvalidArgument, match="batch_seq 7 of producer 'p' was appended with 2"):
        await event_log.append("wf-d", "t1", progress(3), producer_id="p", batch_seq=7)
    assert (await event_log.get_workflow("wf-d", "t1")).last_seq == 2


async def test_racing_copies_of_one_retry_on_two_replicas_store_it_once(
    engines: EngineMaker,
) -> None:
    first, second = engines(), engines()
    logs = [
        EventLog(SqlEventStore(first), MemoryHotTier()),
        EventLog(SqlEventStore(second), MemoryHotTier()),
    ]
    await logs[0].create_workflow(tenant_id="t1", workflow_id="wf-race")
    answers = await asyncio.gather(
        *(
            logs[i % 2].append("wf-race", "t1", progress(2), producer_id="exec", batch_seq=b)
            for b in range(1, 11)
            for i in range(4)
        )
    )
    # Four copies of each of ten batches: every copy of a batch got the same seqs.
    for index in range(0, 40, 4):
        assert answers[index] == answers[index + 1] == answers[index + 2] == answers[index + 3]
    assert sorted(seq for answer in answers[::4] for seq in answer) == list(range(1, 21))
    assert await stored_count(first, "wf-race") == 20
    async with first.connect() as conn:
        rows = (await conn.execute(select(func.count()).select_from(appends))).scalar_one()
    assert rows == 10


async def test_batch_seq_without_producer_is_invalid(event_log: EventLog) -> None:
    await event_log.create_workflow(tenant_id="t1", workflow_id="wf-x")
    with pytest.raises(InvalidArgument, match="producer_id is empty"):
        await event_log.append("wf-x", "t1", progress(1), batch_seq=3)


@pytest.mark.parametrize(
    "terminal",
    [
        new("WORKFLOW_COMPLETED", {"result": "ok"}),
        new("WORKFLOW_CANCELLED", {}),
        new("ERROR_OCCURRED", {"fatal": True, "error_message": "boom"}),
    ],
    ids=["completed", "cancelled", "fatal-error"],
)
async def test_terminal_event_closes_the_log_and_open_streams(
    event_log: EventLog, terminal
) -> None:
    await event_log.create_workflow(tenant_id="t1", workflow_id="wf-t")
    reader = asyncio.create_task(collect(event_log.stream("wf-t", "t1", from_seq=1)))
    await event_log.append("wf-t", "t1", progress(2))
    seqs = await event_log.append("wf-t", "t1", [terminal])
    assert seqs == [3]  # the added STREAM_END's seq is not the producer's
    streamed = await asyncio.wait_for(reader, 10)
    assert [(e.seq, e.type) for e in streamed][-2:] == [(3, terminal.type), (4, "STREAM_END")]
    record = await event_log.get_workflow("wf-t", "t1")
    assert (record.last_seq, record.stream_ended, record.status.is_terminal) == (4, True, True)
    # The producer's own STREAM_END right after is accepted and names the existing one.
    assert await event_log.append("wf-t", "t1", [new("STREAM_END")]) == [4]
    assert (await event_log.get_workflow("wf-t", "t1")).last_seq == 4
    with pytest.raises(FailedPrecondition, match="has ended"):
        await event_log.append("wf-t", "t1", progress(1))


async def test_recoverable_error_does_not_close_the_log(event_log: EventLog) -> None:
    await event_log.create_workflow(tenant_id="t1", workflow_id="wf-e")
    await event_log.append("wf-e", "t1", [new("ERROR_OCCURRED", {"fatal": False})])
    assert await event_log.append("wf-e", "t1", progress(1)) == [2]


async def test_producer_stream_end_in_the_same_batch_is_not_doubled(event_log: EventLog) -> None:
    await event_log.create_workflow(tenant_id="t1", workflow_id="wf-s")
    seqs = await event_log.append(
        "wf-s", "t1", [new("WORKFLOW_COMPLETED", {"result": "r"}), new("STREAM_END")]
    )
    assert seqs == [1, 2]
    assert (await event_log.get_workflow("wf-s", "t1")).last_seq == 2


async def test_events_after_a_terminal_event_in_one_batch_are_refused(event_log: EventLog) -> None:
    await event_log.create_workflow(tenant_id="t1", workflow_id="wf-a")
    with pytest.raises(InvalidArgument, match="only STREAM_END may follow"):
        await event_log.append("wf-a", "t1", [new("WORKFLOW_COMPLETED"), new("PROGRESS")])
    assert (await event_log.get_workflow("wf-a", "t1")).last_seq == 0


async def test_tool_observation_is_cut_on_the_stream_and_kept_whole(event_log: EventLog) -> None:
    await event_log.create_workflow(tenant_id="t1", workflow_id="wf-o")
    # Multi-byte characters right at the cut: the cut is by character, never mid-character.
    whole = "é" * 1999 + "🚀" * 5 + "tail"
    short = "fine"
    await event_log.append(
        "wf-o",
        "t1",
        [
            new("TOOL_OBSERVATION", {"tool_name": "web", "result": whole, "truncated": False}),
            new("TOOL_OBSERVATION", {"tool_name": "calc", "result": short}),
        ],
    )
    await event_log.append("wf-o", "t1", [new("WORKFLOW_COMPLETED")])
    streamed = await collect(event_log.stream("wf-o", "t1", from_seq=1))
    cut_payload = json.loads(streamed[0].payload_json)
    assert cut_payload["result"] == "é" * 1999 + "🚀"
    assert len(cut_payload["result"]) == 2000
    assert cut_payload["truncated"] is True
    cut_payload["result"].encode("utf-8")  # valid text: would raise on a split surrogate
    assert json.loads(streamed[1].payload_json)["result"] == short
    plain = await event_log.list_events("wf-o", "t1", from_seq=1)
    assert json.loads(plain.events[0].payload_json)["result"] == cut_payload["result"]
    full = await event_log.list_events("wf-o", "t1", from_seq=1, full_results=True)
    full_payload = json.loads(full.events[0].payload_json)
    assert full_payload["result"] == whole
    assert full_payload["truncated"] is True
    assert json.loads(full.events[1].payload_json)["result"] == short


async def test_llm_prompt_can_be_made_durable(engine: AsyncEngine) -> None:
    durable_prompts = SqlEventStore(engine, ephemeral_types={"LLM_PARTIAL"})
    log = EventLog(durable_prompts, MemoryHotTier())
    await log.create_workflow(tenant_id="t1", workflow_id="wf-lp")
    await log.append("wf-lp", "t1", [new("LLM_PROMPT", {"prompt": "hi"}), new("LLM_PARTIAL")])
    assert await stored_count(engine, "wf-lp") == 1
