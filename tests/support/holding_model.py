"""Scripted models that hold a run in flight until the test releases them: a run held before
its answer (command feed and restart tests) or in the middle of streaming it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
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


class AnswerHoldingModel(ScriptedOpenAI):
    """Answers every question without tools and streams `chunks` as the answer, one delta
    each, holding the stream after the first `before_hold` of them until `release` opens."""

    def __init__(self, chunks: list[str], before_hold: int) -> None:
        super().__init__(handler=lambda body: text("".join(chunks), chunks))
        self.release = Gate()
        self.holding = 0
        """Answer streams that reached the hold."""
        self._before_hold = before_hold

    def hold_again(self) -> None:
        """Hold the next answer too (once the last one was released)."""
        self.release = Gate()
        self.holding = 0

    async def _stream(self, reply: Reply) -> AsyncIterator[bytes]:
        # The content frames come first: after `before_hold` frames, that many deltas are out.
        sent = 0
        async for frame in super()._stream(reply):
            yield frame
            sent += 1
            if sent == self._before_hold:
                self.holding += 1
                await self.release.wait()
