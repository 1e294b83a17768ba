"""Rate limits (in-process and in real Redis) and the SQL audit log."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import pytest
import redis.asyncio
from sqlalchemy import Connection, select
from sqlalchemy.ext.asyncio import AsyncEngine

from services.tools.buckets import MemoryBuckets, RedisBuckets, TokenBuckets
from services.tools.catalog import ToolRegistry
from services.tools.cleanup import WorkflowDataCleaner
from services.tools.db import create_schema, tool_audit
from services.tools.hooks.audit import AuditHook
from services.tools.hooks.chain import HookChain
from services.tools.hooks.policy import DenyHook
from services.tools.hooks.rate_limit import RateLimitHook
from services.tools.hooks.truncation import TruncationHook
from services.tools.host import ToolHost
from shuttle.db import create_engine
from shuttle.sql_transactions import EngineWrites, SqliteWriter, WriteTransactions, writes_for
from shuttle.tool_calls import ToolCall

REDIS_URL = "redis://127.0.0.1:6379/0"


def call(tool: str, tenant: str, **args: object) -> ToolCall:
    return ToolCall(
        tool_name=tool,
        arguments_json=json.dumps(args),
        call_id=f"c-{uuid.uuid4().hex[:6]}",
        workflow_id="wf-9",
        tenant_id=tenant,
        agent_id="agent-main",
    )


@pytest.fixture
async def redis_buckets() -> AsyncIterator[RedisBuckets]:
    client = redis.asyncio.from_url(REDIS_URL)
    prefix = f"test:{uuid.uuid4().hex}:"
    buckets = RedisBuckets(client, prefix=prefix)
    yield buckets
    keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
    if keys:
        await client.delete(*keys)
    await buckets.close()


async def _limit_per_tenant_and_tool(registry: ToolRegistry, buckets: TokenBuckets) -> None:
    limiter = RateLimitHook(capacity=2, refill_per_second=0, buckets=buckets)
    host = ToolHost(registry, hooks=HookChain([limiter]))
    outcomes = [(await host.execute(call("repeat", "a", text="x"))).blocked for _ in range(3)]
    assert outcomes == [False, False, True]
    blocked = await host.execute(call("repeat", "a", text="x"))
    assert "rate limit reached for repeat" in blocked.block_reason
    # Another tenant, and another tool, have their own buckets.
    assert not (await host.execute(call("repeat", "b", text="x"))).blocked
    assert not (await host.execute(call("calculator", "a", expression="1"))).blocked


async def test_memory_rate_limit(registry: ToolRegistry) -> None:
    await _limit_per_tenant_and_tool(registry, MemoryBuckets())


async def test_redis_rate_limit(registry: ToolRegistry, redis_buckets: RedisBuckets) -> None:
    await _limit_per_tenant_and_tool(registry, redis_buckets)


async def test_redis_buckets_are_shared_between_replicas(
    registry: ToolRegistry, redis_buckets: RedisBuckets
) -> None:
    # Two hosts stand for two replicas: one bucket in Redis serves both.
    hosts = [
        ToolHost(
            registry,
            hooks=HookChain(
                [RateLimitHook(capacity=3, refill_per_second=0, buckets=redis_buckets)]
            ),
        )
        for _ in range(2)
    ]
    blocked = [
        (await hosts[i % 2].execute(call("repeat", "t", text="x"))).blocked for i in range(5)
    ]
    assert blocked == [False, False, False, True, True]


async def test_redis_bucket_refills(redis_buckets: RedisBuckets) -> None:
    assert await redis_buckets.take("k", 1, 1000) == 0.0
    wait = await redis_buckets.take("k", 1, 0.5)
    assert 0 < wait <= 2.0


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'tools.db'}")
    await create_schema(engine)
    yield engine
    await engine.dispose()


@pytest.fixture
async def audit_writes(engine: AsyncEngine) -> AsyncIterator[WriteTransactions]:
    """As the service builds them: a writer thread on the SQLite file."""
    writes = writes_for(engine)
    assert isinstance(writes, SqliteWriter)
    yield writes
    await writes.close()


async def test_audit_row_per_call_including_blocked(
    registry: ToolRegistry, engine: AsyncEngine, audit_writes: WriteTransactions
) -> None:
    chain = HookChain(
        [
            DenyHook(tools=("boom",), reason="retired"),
            TruncationHook(max_chars=5),
            AuditHook(writes=audit_writes),
        ]
    )
    host = ToolHost(registry, hooks=chain)
    await host.execute(call("repeat", "acme", text="abcdefgh"))
    await host.execute(call("refuse", "acme"))
    await host.execute(call("boom", "acme"))
    await chain.drain()
    async with engine.connect() as conn:
        rows = (await conn.execute(select(tool_audit).order_by(tool_audit.c.id))).all()
    assert [(r.tool_name, r.outcome) for r in rows] == [
        ("repeat", "ok"),
        ("refuse", "error"),
        ("boom", "blocked"),
    ]
    ok, error, blocked = rows
    assert ok.tenant_id == "acme" and ok.workflow_id == "wf-9" and ok.agent_id == "agent-main"
    assert json.loads(ok.arguments_json) == {"text": "abcdefgh"}
    # The model saw 5 characters; the record keeps everything.
    assert ok.result == "abcdefgh"
    assert "upstream said no" in error.error
    assert blocked.blocked_by == "deny" and blocked.block_reason == "retired"
    assert all(r.duration_ms >= 0 for r in rows)


# A database that cannot be opened, through the writer thread and through the engine.
BROKEN_WRITES = [writes_for, EngineWrites]


@pytest.mark.parametrize("writes_on", BROKEN_WRITES)
async def test_audit_failure_is_advisory(
    registry: ToolRegistry,
    caplog: pytest.LogCaptureFixture,
    writes_on: Callable[[AsyncEngine], WriteTransactions],
) -> None:
    broken = create_engine("sqlite+aiosqlite:////nonexistent-dir/x.db")
    writes = writes_on(broken)
    chain = HookChain([AuditHook(writes=writes)])
    host = ToolHost(registry, hooks=chain)
    result = await host.execute(call("repeat", "acme", text="still works"))
    assert result.ok and result.observation == "still works"
    await chain.drain()
    assert "audit rows could not be written" in caplog.text
    await writes.close()
    await broken.dispose()


@pytest.mark.parametrize("writes_on", BROKEN_WRITES)
async def test_fail_closed_audit_withholds_the_result_it_could_not_record(
    registry: ToolRegistry, writes_on: Callable[[AsyncEngine], WriteTransactions]
) -> None:
    broken = create_engine("sqlite+aiosqlite:////nonexistent-dir/x.db")
    writes = writes_on(broken)
    host = ToolHost(registry, hooks=HookChain([AuditHook(writes=writes, fail_closed=True)]))
    result = await host.execute(call("repeat", "acme", text="secret"))
    assert result.error and "secret" not in result.observation
    await writes.close()
    await broken.dispose()


async def test_fail_closed_audit_row_is_written_before_the_result(
    registry: ToolRegistry, engine: AsyncEngine, audit_writes: WriteTransactions
) -> None:
    host = ToolHost(registry, hooks=HookChain([AuditHook(writes=audit_writes, fail_closed=True)]))
    await host.execute(call("repeat", "acme", text="at once"))
    async with engine.connect() as conn:
        rows = (await conn.execute(select(tool_audit))).all()
    assert [(r.tool_name, r.result) for r in rows] == [("repeat", "at once")]


async def test_a_burst_of_calls_gets_every_audit_row_once(
    registry: ToolRegistry, engine: AsyncEngine, audit_writes: WriteTransactions
) -> None:
    chain = HookChain([AuditHook(writes=audit_writes)])
    host = ToolHost(registry, hooks=chain)
    texts = [f"call {n}" for n in range(1200)]
    await asyncio.gather(*(host.execute(call("repeat", "acme", text=t)) for t in texts))
    await chain.drain()
    async with engine.connect() as conn:
        rows = (await conn.execute(select(tool_audit))).all()
    assert sorted(r.result for r in rows) == sorted(texts)


_P = ParamSpec("_P")
_T = TypeVar("_T")


class CountedWrites:
    """The real writes, counting the transactions."""

    def __init__(self, writes: WriteTransactions) -> None:
        self.writes = writes
        self.transactions = 0

    async def write(
        self, work: Callable[Concatenate[Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        self.transactions += 1
        return await self.writes.write(work, *args, **kwargs)

    async def close(self) -> None:
        await self.writes.close()


async def test_rows_of_calls_made_one_after_another_share_a_transaction(
    registry: ToolRegistry, engine: AsyncEngine, audit_writes: WriteTransactions
) -> None:
    counted = CountedWrites(audit_writes)
    # Lingering longer than the test runs: only drain can make the writer go on.
    chain = HookChain([AuditHook(writes=counted, linger_seconds=600)])
    host = ToolHost(registry, hooks=chain)
    for n in range(3):
        await host.execute(call("repeat", "acme", text=f"call {n}"))
    async with engine.connect() as conn:
        assert (await conn.execute(select(tool_audit))).all() == []
    await chain.drain()
    async with engine.connect() as conn:
        rows = (await conn.execute(select(tool_audit).order_by(tool_audit.c.id))).all()
    assert [r.result for r in rows] == ["call 0", "call 1", "call 2"]
    assert counted.transactions == 1


async def test_forgetting_a_workflow_waits_for_its_queued_audit_rows(
    registry: ToolRegistry, engine: AsyncEngine, audit_writes: WriteTransactions
) -> None:
    chain = HookChain([AuditHook(writes=audit_writes)])
    host = ToolHost(registry, hooks=chain)
    cleaner = WorkflowDataCleaner(None, engine, chain)
    await host.execute(call("repeat", "acme", text="forget me"))
    forgotten = await cleaner.forget("acme", ["wf-9"])
    await chain.drain()
    async with engine.connect() as conn:
        rows = (await conn.execute(select(tool_audit))).all()
    assert forgotten.records == 1 and rows == []


async def test_arguments_and_output_utf8_cannot_hold_lose_no_audit_rows(
    registry: ToolRegistry, engine: AsyncEngine, audit_writes: WriteTransactions
) -> None:
    # Half a surrogate pair, escaped in the JSON arguments as a model may send it; rows are
    # written in batches, so one row the database refuses would take its neighbours along.
    chain = HookChain([AuditHook(writes=audit_writes)])
    host = ToolHost(registry, hooks=chain)
    await asyncio.gather(
        host.execute(call("repeat", "acme", text="before")),
        host.execute(call("repeat", "acme", text="caf\udce9")),
        host.execute(call("repeat", "acme", text="after")),
    )
    await chain.drain()
    async with engine.connect() as conn:
        rows = (await conn.execute(select(tool_audit))).all()
    stored = sorted((json.loads(r.arguments_json)["text"], r.result) for r in rows)
    assert stored == [("after", "after"), ("before", "before"), ("caf\udce9", "caf\ufffd")]
