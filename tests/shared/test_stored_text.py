"""Free text that a database may refuse (NUL for PostgreSQL, lone surrogates for any UTF-8
column), written through the real stores on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.stores.db import create_schema as create_gateway_schema
from gateway.stores.sessions import SessionStore
from services.tools.approvals import ApprovalNotFoundError, ApprovalStore
from services.tools.catalog import ToolRegistry
from services.tools.db import create_schema as create_tools_schema
from services.tools.db import tool_audit
from services.tools.hooks.audit import AuditHook
from services.tools.hooks.chain import HookChain
from services.tools.host import ToolHost
from shuttle.db import create_engine
from shuttle.sql_transactions import writes_for
from shuttle.tool_calls import ToolCall
from tests.support.databases import postgres_url, schema_engines  # noqa: F401 - fixtures
from tests.tools.conftest import registry  # noqa: F401 - fixture


@pytest.fixture(params=["sqlite", "postgresql"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if request.param == "postgresql":
        async with schema_engines(request.getfixturevalue("postgres_url")) as make:
            engine = make()
            await create_tools_schema(engine)
            await create_gateway_schema(engine)
            yield engine
        return
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'stored.db'}")
    await create_tools_schema(engine)
    await create_gateway_schema(engine)
    yield engine
    await engine.dispose()


def repeat(text: str) -> ToolCall:
    return ToolCall(
        tool_name="repeat",
        arguments_json=json.dumps({"text": text}),
        call_id="c-1",
        workflow_id="wf-1",
        tenant_id="acme",
        agent_id="agent-main",
    )


async def test_audit_rows_keep_every_call_whatever_its_output_holds(
    registry: ToolRegistry,  # noqa: F811 - fixture
    engine: AsyncEngine,
) -> None:
    # Rows are written in batches: one refused value would lose its neighbours too.
    writes = writes_for(engine)
    chain = HookChain([AuditHook(writes=writes)])
    host = ToolHost(registry, hooks=chain)
    texts = ["before", "a\x00b", "caf\udce9", "after"]
    await asyncio.gather(*(host.execute(repeat(text)) for text in texts))
    await chain.drain()
    await writes.close()
    async with engine.connect() as conn:
        rows = (await conn.execute(select(tool_audit).order_by(tool_audit.c.id))).all()
    assert sorted(row.result for row in rows) == sorted(
        ["before", "a\ufffdb", "caf\ufffd", "after"]
    )
    assert sorted(json.loads(row.arguments_json)["text"] for row in rows) == sorted(texts)


async def test_session_titles_and_turns_hold_what_a_user_typed(engine: AsyncEngine) -> None:
    store = SessionStore(engine)
    session_id = await store.open("acme", "", "What is\x00 6*7?")
    await store.add_turn("acme", session_id, "What is\x00 6*7?", answer="42\x00")
    session = await store.get("acme", session_id)
    assert session is not None and session.title == "What is\ufffd 6*7?"
    (turn,) = await store.turns("acme", session_id)
    assert (turn.user_message, turn.answer) == ("What is\ufffd 6*7?", "42\ufffd")


async def test_ids_holding_nul_are_found_as_sent_or_not_at_all(engine: AsyncEngine) -> None:
    # Compared as stored, through the same column type: a lookup never reaches the database
    # with a character it refuses.
    store = SessionStore(engine)
    session_id = await store.open("acme", "mine\x00", "hello")
    await store.add_turn("acme", session_id, "hello", workflow_id="wf\x00")
    found = await store.get("acme", "mine\x00")
    assert found is not None and found.session_id == "mine\ufffd"
    assert [turn.workflow_id for turn in await store.turns("acme", "mine\x00")] == ["wf\ufffd"]
    assert await store.session_of("acme", "wf\x00") == "mine\ufffd"
    assert await store.get("acme", "other\x00") is None
    approvals = ApprovalStore(engine)
    with pytest.raises(ApprovalNotFoundError):
        await approvals.get("appr-\x00", "acme")
