"""A scripted model whose runs hold their second call until the test releases them: runs
then stay in flight (for the command feed and restart tests)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from tests.support.gate import Gate
from tests.support.scripted_openai import Reply, ScriptedOpenAI, text

WAIT_SECONDS = 60


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        await asyncio.sleep(0.01)


def interrupted(body: dict[str, Any]) -> bool:
    return any("[USER INTERRUPT]" in str(m.get("content") or "") for m in body["messages"])


def asked(body: dict[str, Any], query: str) -> bool:
    return any(m.get("role") == "user" and m.get("content") == query for m in body["messages"])


class HoldingModel(ScriptedOpenAI):
    """Runs asked "hold" call the calculator once and hold their next call until released;
    the run asked "until interrupted" calls it until it sees the user's interrupt."""

    def __init__(self) -> None:
        super().__init__(handler=self.reply)
        self.held = 0
        self.saw_interrupt = 0
        self._gate = Gate()

    def reply(self, body: dict[str, Any]) -> Reply:
        if body.get("stream"):
            return text("Done.")
        if interrupted(body):
            self.saw_interrupt += 1
            return text("Noted.")
        rounds = sum(m.get("role") == "tool" for m in body["messages"])
        if asked(body, "hold") and rounds:
            return text("Two.")
        return Reply(tool_calls=[(f"call-{rounds}", "calculator", {"expression": "1+1"})])

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        rounds = sum(m.get("role") == "tool" for m in body.get("messages", []))
        if asked(body, "hold") and rounds and not body.get("stream"):
            self.held += 1
            await self._gate.wait()
        return await super()._completions(request)

    def release(self) -> None:
        self._gate.open()
