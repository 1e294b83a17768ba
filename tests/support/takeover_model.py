"""The chaos tests' deterministic model (a few calculator calls, then a streamed answer),
able to hold one call in flight while a test hands its run over or kills its executor: the
first loop call made after `hold_loop_at` tool results, or the first answer stream after
`hold_stream_after` deltas. A call made again (by the replica that took the run over) is
answered at once, and the same way: the reply depends only on the conversation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from tests.chaos.model import ChaosModel
from tests.support.gate import Gate
from tests.support.scripted_openai import Reply, ScriptedOpenAI


class TakeoverModel(ScriptedOpenAI):
    def __init__(
        self,
        tool_steps: int = 3,
        *,
        hold_loop_at: int | None = None,
        hold_stream_after: int | None = None,
    ) -> None:
        self.chaos = ChaosModel(tool_steps=tool_steps)
        super().__init__(handler=self.chaos)
        self.loop_gate = Gate()
        self.stream_gate = Gate()
        self.held = 0
        """Calls that reached a hold (one loop call, one answer stream at most)."""
        self.streams = 0
        self._hold_loop_at = hold_loop_at
        self._hold_stream_after = hold_stream_after
        self._loop_held = False

    async def _completions(self, request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        rounds = sum(m.get("role") == "tool" for m in body.get("messages", []))
        if not body.get("stream") and rounds == self._hold_loop_at and not self._loop_held:
            self._loop_held = True
            self.held += 1
            await self.loop_gate.wait()
        if body.get("stream"):
            self.streams += 1
        return await super()._completions(request)

    async def _stream(self, reply: Reply) -> AsyncIterator[bytes]:
        holding = self._hold_stream_after is not None and self.streams == 1
        sent = 0
        async for frame in super()._stream(reply):
            yield frame
            sent += 1
            if holding and sent == self._hold_stream_after:
                self.held += 1
                await self.stream_gate.wait()

    def release(self) -> None:
        self.loop_gate.open()
        self.stream_gate.open()
