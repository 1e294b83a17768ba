"""The peers that persist each run as it goes, as Shuttle's log does: LangGraph's prebuilt
agent with its SQLite and its PostgreSQL checkpointer, and the OpenAI Agents SDK's agent with
a `SQLiteSession`. Each runs the same conversation as the other sides, in this process.

A peer that cannot run here (its package missing, PostgreSQL unreachable) is named and left
out, as LangGraph's column is without the `bench` extra.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from bench.peers import agents_sdk, langgraph_agent

PERSISTING_SIDES = ("langgraph_sqlite", "langgraph_postgres", "agents_sqlite")


@contextlib.asynccontextmanager
async def persisting_sides(
    base_url: str, postgres_dsn: str = langgraph_agent.POSTGRES_DSN
) -> AsyncIterator[dict[str, Callable[[int], Awaitable[None]]]]:
    """Each persisting peer that can run here, by side name: one run of K tool rounds, checked
    to have made its K calls and answered. Their databases are gone on exit."""
    sides: dict[str, Callable[[int], Awaitable[None]]] = {}
    async with contextlib.AsyncExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        missing = langgraph_agent.available()
        if missing is None:
            sqlite = await stack.enter_async_context(
                langgraph_agent.sqlite_agent(base_url, scratch)
            )
            sides["langgraph_sqlite"] = sqlite.once
            unreachable = await langgraph_agent.postgres_unreachable(postgres_dsn)
            if unreachable is None:
                postgres = await stack.enter_async_context(
                    langgraph_agent.postgres_agent(base_url, postgres_dsn)
                )
                sides["langgraph_postgres"] = postgres.once
            else:
                print(
                    f"PostgreSQL is not reachable ({unreachable}): langgraph_postgres is left out"
                )
        else:
            print(f"{missing}: the LangGraph checkpointer sides are left out")
        missing = agents_sdk.available()
        if missing is None:
            agents = await stack.enter_async_context(agents_sdk.session_agent(base_url, scratch))
            sides["agents_sqlite"] = agents.once
        else:
            print(f"{missing}: agents_sqlite is left out")
        yield sides
