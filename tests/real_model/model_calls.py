"""A recording relay between Shuttle and the model server: every model call's request, its
status and how long the caller waited for it, whichever service made it (the planner's
routing and plans included, which put nothing on a run's log)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.support.threaded_server import ThreadedServer


@dataclass
class ModelCall:
    started: float
    """Wall clock (seconds since the epoch)."""
    body: dict[str, Any]
    status: int = 0
    seconds: float = 0.0
    """How long the caller's request lasted, to the reply's end or the caller hanging up."""
    reply: dict[str, Any] | None = None
    """A reply that was not streamed."""

    @property
    def max_tokens(self) -> int | None:
        value = self.body.get("max_tokens", self.body.get("max_completion_tokens"))
        return int(value) if value is not None else None

    @property
    def finish_reason(self) -> str:
        if self.reply is None:
            return ""
        choices = self.reply.get("choices") or [{}]
        return str(choices[0].get("finish_reason") or "")


class ModelCallRecorder:
    def __init__(self, upstream: str) -> None:
        """`upstream`: the model server's base URL (…/v1)."""
        self._upstream = upstream.rstrip("/")
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(None))
        self._lock = threading.Lock()
        self.calls: list[ModelCall] = []
        self._server = ThreadedServer(
            Starlette(routes=[Route("/v1/{path:path}", self._relay, methods=["GET", "POST"])]),
            name="model call recorder",
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.port}/v1"

    def start(self) -> ModelCallRecorder:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def since(self, wall_time: float) -> list[ModelCall]:
        with self._lock:
            return [c for c in self.calls if c.started >= wall_time]

    async def _relay(self, request: Request) -> Response:
        path = request.path_params["path"]
        raw = await request.body()
        if request.method == "GET":
            upstream = await self._client.get(f"{self._upstream}/{path}")
            return Response(upstream.content, upstream.status_code, media_type="application/json")
        body = json.loads(raw or b"{}")
        call = ModelCall(time.time(), body)
        began = time.monotonic()
        with self._lock:
            self.calls.append(call)
        outbound = self._client.build_request(
            "POST",
            f"{self._upstream}/{path}",
            content=raw,
            headers={"content-type": "application/json"},
        )
        try:
            upstream = await self._client.send(outbound, stream=True)
        except BaseException:
            call.seconds = time.monotonic() - began
            raise
        call.status = upstream.status_code

        def finished() -> None:
            call.seconds = time.monotonic() - began

        if not body.get("stream"):
            try:
                content = await upstream.aread()
            finally:
                await upstream.aclose()
                finished()
            if upstream.status_code == 200:
                call.reply = json.loads(content)
            return Response(content, upstream.status_code, media_type="application/json")

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()
                finished()

        return StreamingResponse(
            chunks(),
            upstream.status_code,
            media_type=upstream.headers.get("content-type", "text/event-stream"),
            background=BackgroundTask(finished),
        )
