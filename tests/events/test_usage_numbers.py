"""Numbers a terminal event reports that the log copies into the workflow's row: any value,
however absurd, leaves the terminal event stored and the row within its columns' range."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from services.events.hot import MemoryHotTier
from services.events.lifecycle import MAX_COUNT, derive_update
from services.events.log import EventLog
from services.events.migrate import migrate
from services.events.records import NewEvent, WorkflowStatus
from services.events.store import SqlEventStore
from shuttle.db import create_engine
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

from .helpers import draft, new

COUNTS = ("duration_ms", "total_tokens", "input_tokens", "output_tokens")
# The exact payload that failed an Append with "Python int too large to convert to SQLite
# INTEGER" (UNKNOWN) before numbers were range-checked.
BROKE = {"result": "done", "total_tokens": 2**64}


def completed(payload: dict[str, object]) -> NewEvent:
    return new("WORKFLOW_COMPLETED", payload)


def clamped(value: int) -> int | None:
    """What the row keeps of a count: nothing of a negative one, the column's top above it."""
    return None if value < 0 else min(value, MAX_COUNT)


async def test_a_count_beyond_64_bits_is_stored_at_the_columns_top(event_log: EventLog) -> None:
    """On SQLite and PostgreSQL: the terminal event is kept as sent, the row clamped."""
    workflow = await event_log.create_workflow(tenant_id="t1")
    wf = workflow.workflow_id
    seqs = await event_log.append(wf, "t1", [new("WORKFLOW_STARTED"), completed(BROKE)])
    record = await event_log.get_workflow(wf, "t1")
    assert record.status == WorkflowStatus.COMPLETED and record.stream_ended
    assert record.usage.total_tokens == MAX_COUNT
    assert record.result == "done"
    stored = (await event_log.list_events(wf, "t1", from_seq=seqs[1], limit=1)).events[0]
    assert json.loads(stored.payload_json)["total_tokens"] == 2**64


async def test_append_of_the_payload_that_broke_answers_ok(
    stub: events_pb2_grpc.EventServiceAsyncStub,
) -> None:
    """Through the gRPC service: OK, not UNKNOWN, and the service goes on."""
    metadata = tenant_metadata("t1")
    workflow = await stub.CreateWorkflow(events_pb2.CreateWorkflowRequest(), metadata=metadata)
    request = events_pb2.AppendRequest(
        workflow_id=workflow.workflow_id, events=[draft("WORKFLOW_COMPLETED", BROKE)]
    )
    reply = await stub.Append(request, metadata=metadata)
    assert len(reply.seqs) == 1
    got = await stub.GetWorkflow(
        events_pb2.GetWorkflowRequest(workflow_id=workflow.workflow_id), metadata=metadata
    )
    assert got.status == common_pb2.WORKFLOW_STATUS_COMPLETED
    assert got.usage.total_tokens == MAX_COUNT


async def test_negative_and_non_finite_numbers_are_left_out_and_logged(
    event_log: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    workflow = await event_log.create_workflow(tenant_id="t1")
    # 1e400 parses as infinity; 1e300 is an integral float beyond the column.
    payload_json = (
        '{"total_tokens": -5, "input_tokens": 7, "total_cost_usd": 1e400, "duration_ms": 1e300}'
    )
    event = NewEvent(type="WORKFLOW_CANCELLED", payload_json=payload_json)
    with caplog.at_level(logging.WARNING, logger="services.events.lifecycle"):
        await event_log.append(workflow.workflow_id, "t1", [new("PROGRESS"), event])
    record = await event_log.get_workflow(workflow.workflow_id, "t1")
    assert record.status == WorkflowStatus.CANCELLED
    assert (record.usage.total_tokens, record.usage.input_tokens) == (0, 7)
    assert record.usage.cost_usd == 0.0
    assert record.duration_ms == MAX_COUNT
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        "event 1: total_tokens -5 is out of range (at least 0); left out" in m for m in messages
    )
    assert any("total_cost_usd inf" in m and "finite" in m for m in messages)
    assert any(f"duration_ms 1e+300 is out of range (at most {MAX_COUNT})" in m for m in messages)


@given(
    field=st.sampled_from(COUNTS),
    value=st.integers(min_value=-(2**70), max_value=2**70)
    | st.integers(min_value=MAX_COUNT - 2, max_value=MAX_COUNT + 2),
)
@example(field="total_tokens", value=2**64)
@example(field="duration_ms", value=10**400)
def test_every_count_lands_within_its_column(field: str, value: int) -> None:
    update = derive_update([new("PROGRESS"), completed({field: value})])
    assert getattr(update, field) == clamped(value)
    for other in set(COUNTS) - {field}:
        assert getattr(update, other) is None


@given(cost=st.floats() | st.integers(min_value=-(2**1100), max_value=2**1100))
@example(cost=math.inf)
@example(cost=2**1100)
def test_every_cost_lands_finite_and_not_negative(cost: float) -> None:
    update = derive_update([completed({"total_cost_usd": cost})])
    try:
        amount: float | None = float(cost)
    except OverflowError:  # an int beyond any float
        amount = None
    if amount is not None and not (math.isfinite(amount) and amount >= 0):
        amount = None
    assert update.cost_usd == amount


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    field=st.sampled_from(COUNTS),
    value=st.integers(min_value=-(2**66), max_value=2**66),
)
@example(field="total_tokens", value=2**64)
def test_every_count_appends_to_a_real_database(tmp_path: Path, field: str, value: int) -> None:
    """The property against a real SQLite file: every append commits, the row is clamped."""
    asyncio.run(_append_and_read(tmp_path / "usage.db", field, value))


async def _append_and_read(path: Path, field: str, value: int) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    store = SqlEventStore(engine)
    try:
        await migrate(engine)
        event_log = EventLog(store, MemoryHotTier())
        workflow = await event_log.create_workflow(tenant_id="t1")
        await event_log.append(workflow.workflow_id, "t1", [completed({field: value})])
        record = await event_log.get_workflow(workflow.workflow_id, "t1")
        row = {
            "duration_ms": record.duration_ms,
            "total_tokens": record.usage.total_tokens,
            "input_tokens": record.usage.input_tokens,
            "output_tokens": record.usage.output_tokens,
        }
        assert record.stream_ended
        assert row[field] == (clamped(value) or 0)
    finally:
        await store.close()
        await engine.dispose()
