"""LangGraph's prebuilt ReAct agent on the scripted model, with and without its checkpointers.

Without a checkpointer the agent keeps a run's state in memory only (`langgraph_runner`).
With one, as LangGraph's documentation sets an agent up to persist, every step's checkpoint is
written to a database before the next step: SQLite (`AsyncSqliteSaver`, one aiosqlite
connection on a file) or PostgreSQL (`AsyncPostgresSaver`, one psycopg connection). Each run
is a thread of its own (a fresh thread id), so no run reads another's history.

The packages come from the `bench` extra; without them `available()` says so and no peer opens.
"""

from __future__ import annotations

import contextlib
import importlib
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bench.peers.loops import CALCULATOR, LLM_TIMEOUT_SECONDS
from bench.peers.outcome import Finished, checked

POSTGRES_DSN = "postgresql://postgres@127.0.0.1:5432/test"
"""The PostgreSQL the tests use (trust on loopback); each peer keeps to a schema of its own."""
AGENT_PACKAGES = ("langchain_openai", "langgraph.prebuilt")
SAVER_PACKAGES = (
    *AGENT_PACKAGES,
    "langgraph.checkpoint.sqlite.aio",
    "langgraph.checkpoint.postgres.aio",
)


def available(modules: tuple[str, ...] = SAVER_PACKAGES) -> str | None:
    """None if `modules` (LangGraph and its checkpointers) can be imported, else what is
    missing."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{exc.name or module} is not installed (the `bench` extra)"
    return None


def react_agent(base_url: str, checkpointer: Any = None) -> Any:
    """The prebuilt agent with the calculator in-process, on the same model as the peers."""
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    @tool
    async def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        return (await CALCULATOR.run({"expression": expression})).text

    # As patient as the other peers' clients: a thousand runs starting at once on two cores
    # outlast the SDK's default 5 s connect timeout.
    model = ChatOpenAI(
        base_url=base_url,
        api_key="bench",  # type: ignore[arg-type, unused-ignore]
        model="scripted-model",
        max_retries=0,
        timeout=LLM_TIMEOUT_SECONDS,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's deprecation notice
        return create_react_agent(model, [calculator], checkpointer=checkpointer)


def run_config(k: int, thread_id: str | None = None) -> Any:
    config: dict[str, Any] = {"recursion_limit": 2 * k + 10}
    if thread_id is not None:
        config["configurable"] = {"thread_id": thread_id}
    return config


def langgraph_runner(base_url: str) -> Callable[[int], Awaitable[None]] | None:
    """The prebuilt agent without a checkpointer, or None without the bench extra."""
    if available(AGENT_PACKAGES) is not None:
        return None
    return LangGraphAgent(base_url, None).once


class LangGraphAgent:
    """The prebuilt agent; with a checkpointer, each run a new thread saved step by step."""

    def __init__(self, base_url: str, checkpointer: Any) -> None:
        self._agent = react_agent(base_url, checkpointer)
        self._saving = checkpointer is not None

    async def run(self, k: int) -> Finished:
        thread_id = uuid.uuid4().hex
        config = run_config(k, thread_id if self._saving else None)
        state = await self._agent.ainvoke({"messages": [("user", f"iterations={k}")]}, config)
        messages = state["messages"]
        last = messages[-1]
        answer = last.content if last.type == "ai" and not last.tool_calls else ""
        tool_results = sum(m.type == "tool" for m in messages)
        return checked(Finished(thread_id, str(answer), tool_results), k)

    async def once(self, k: int) -> None:
        await self.run(k)

    async def saved(self, thread_id: str) -> list[str]:
        """The thread's conversation as its checkpointer holds it."""
        state = await self._agent.aget_state({"configurable": {"thread_id": thread_id}})
        kinds: list[str] = []
        for message in state.values.get("messages", []):
            if message.type == "human":
                kinds.append("user")
            elif message.type == "tool":
                kinds.append("tool_result")
            elif message.type == "ai" and message.tool_calls:
                kinds.extend("tool_call" for _ in message.tool_calls)
            elif message.type == "ai":
                kinds.append("answer")
        return kinds


@contextlib.asynccontextmanager
async def sqlite_agent(base_url: str, directory: Path) -> AsyncIterator[LangGraphAgent]:
    """The agent saving to SQLite, on a file in `directory`."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(directory / "langgraph.db")) as saver:
        await saver.setup()
        yield LangGraphAgent(base_url, saver)


async def postgres_unreachable(dsn: str = POSTGRES_DSN) -> str | None:
    """None if PostgreSQL answers at `dsn`, else why not."""
    import psycopg  # type: ignore[import-not-found, unused-ignore]

    try:
        await _execute(dsn, "SELECT 1")
    except psycopg.OperationalError as exc:
        return " ".join(str(exc).split())
    return None


async def _execute(dsn: str, statement: str) -> None:
    import psycopg  # type: ignore[import-not-found, unused-ignore]

    async with await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, connect_timeout=5
    ) as connection:
        await connection.execute(statement)


@contextlib.asynccontextmanager
async def postgres_agent(base_url: str, dsn: str = POSTGRES_DSN) -> AsyncIterator[LangGraphAgent]:
    """The agent saving to PostgreSQL, its tables in a schema of its own, dropped on exit, so
    that runs of the benchmark leave nothing behind and never meet another's tables."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    schema = f"bench_langgraph_{uuid.uuid4().hex[:12]}"
    separator = "&" if "?" in dsn else "?"
    in_schema = f"{dsn}{separator}options={quote(f'-csearch_path={schema}')}"
    await _execute(dsn, f'CREATE SCHEMA "{schema}"')
    try:
        async with AsyncPostgresSaver.from_conn_string(in_schema) as saver:
            await saver.setup()
            yield LangGraphAgent(base_url, saver)
    finally:
        await _execute(dsn, f'DROP SCHEMA "{schema}" CASCADE')
