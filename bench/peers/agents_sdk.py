"""The OpenAI Agents SDK's agent on the scripted model, its runs saved in a `SQLiteSession`.

The agent calls the model over Chat Completions (`OpenAIChatCompletionsModel` on an
`AsyncOpenAI` client whose base URL is the scripted server, as patient and with no retries as
the bare loop's client) and the calculator in-process as a function tool. Every run is a
session of its own (a fresh session id) on one SQLite file: the SDK reads the session's
history before the first model call and appends each turn's items as the run goes. Tracing is
switched off, so nothing is sent anywhere but the scripted server.

`openai-agents` comes from the `bench` extra; without it `available()` says so.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai

from bench.peers.loops import CALCULATOR, LLM_TIMEOUT_SECONDS
from bench.peers.outcome import Finished, checked


def available() -> str | None:
    """None if the Agents SDK can be imported, else what is missing."""
    try:
        import agents  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (the `bench` extra)"
    return None


class SessionAgent:
    """The SDK's agent; each run a new `SQLiteSession` on the same file."""

    def __init__(self, base_url: str, database: Path) -> None:
        from agents import (  # type: ignore[import-not-found, unused-ignore]
            Agent,
            OpenAIChatCompletionsModel,
            function_tool,
            set_tracing_disabled,
        )

        set_tracing_disabled(True)

        @function_tool
        async def calculator(expression: str) -> str:
            """Evaluate an arithmetic expression."""
            return (await CALCULATOR.run({"expression": expression})).text

        self.client = openai.AsyncOpenAI(
            base_url=base_url, api_key="bench", max_retries=0, timeout=LLM_TIMEOUT_SECONDS
        )
        model = OpenAIChatCompletionsModel(model="scripted-model", openai_client=self.client)
        self._agent: Any = Agent(name="bench", model=model, tools=[calculator])
        self._database = database

    def _session(self, session_id: str) -> Any:
        from agents import SQLiteSession  # type: ignore[import-not-found, unused-ignore]

        return SQLiteSession(session_id, self._database)

    async def run(self, k: int) -> Finished:
        from agents import Runner, ToolCallOutputItem  # type: ignore[import-not-found, unused-ignore]

        session_id = uuid.uuid4().hex
        session = self._session(session_id)
        try:
            result = await Runner.run(
                self._agent, f"iterations={k}", session=session, max_turns=k + 5
            )
        finally:
            session.close()
        tool_results = sum(isinstance(item, ToolCallOutputItem) for item in result.new_items)
        answer = result.final_output if isinstance(result.final_output, str) else ""
        return checked(Finished(session_id, answer, tool_results), k)

    async def once(self, k: int) -> None:
        await self.run(k)

    async def saved(self, session_id: str) -> list[str]:
        """The session's conversation as the SQLite file holds it."""
        session = self._session(session_id)
        try:
            items = await session.get_items()
        finally:
            session.close()
        kinds: list[str] = []
        for item in items:
            kind = item.get("type", "message")
            if kind == "function_call":
                kinds.append("tool_call")
            elif kind == "function_call_output":
                kinds.append("tool_result")
            elif item.get("role") == "user":
                kinds.append("user")
            elif item.get("role") == "assistant":
                kinds.append("answer")
        return kinds


@contextlib.asynccontextmanager
async def session_agent(base_url: str, directory: Path) -> AsyncIterator[SessionAgent]:
    """The SDK's agent saving to a SQLite file in `directory`; its client closed on exit."""
    agent = SessionAgent(base_url, directory / "agents.db")
    try:
        yield agent
    finally:
        await agent.client.close()
