"""An OpenAI-compatible HTTP server whose replies the test scripts.

It stands where the model provider would: the only part of the system we do not own.
Runs uvicorn in a background thread on a free loopback port.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Reply:
    """One scripted answer: text, tool calls, or an HTTP error."""

    content: str = ""
    tool_calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    status: int = 200
    chunks: list[str] | None = None
    """For streamed calls: how the content is split into deltas (default: by word)."""
    reasoning_content: str = ""
    """A thinking model's separate reasoning field (DeepSeek-style), when set."""


def text(content: str, chunks: list[str] | None = None) -> Reply:
    return Reply(content=content, chunks=chunks)


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> Reply:
    return Reply(tool_calls=[(call_id, name, arguments)])


def error(status: int, message: str = "scripted failure") -> Reply:
    return Reply(content=message, status=status)


Handler = Callable[[dict[str, Any]], Reply]


class ScriptedOpenAI:
    """Serves /v1/chat/completions and /v1/models from a script; records every request."""

    model = "scripted-model"

    def __init__(self, handler: Handler | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.latency_seconds = 0.0
        """How long every reply waits before it starts, like a real model's time to first token."""
        self._queue: deque[Reply] = deque()
        self._handler = handler
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def set_handler(self, handler: Handler) -> None:
        self._handler = handler

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            if self._queue:
                return self._queue.popleft()
        if self._handler is not None:
            return self._handler(body)
        return error(500, "the test scripted no reply for this call")

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        reply = self._next_reply(body)
        if self.latency_seconds:
            await asyncio.sleep(self.latency_seconds)
        if reply.status != 200:
            payload = {"error": {"message": reply.content, "type": "scripted", "code": None}}
            return JSONResponse(payload, status_code=reply.status)
        if body.get("stream"):
            return StreamingResponse(self._stream(reply), media_type="text/event-stream")
        return JSONResponse(self._completion(reply, body))

    def _completion(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
        if reply.reasoning_content:
            message["reasoning_content"] = reply.reasoning_content
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for call_id, name, args in reply.tool_calls
            ]
        prompt_tokens = sum(len(str(m.get("content") or "")) // 4 for m in body["messages"])
        return {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 7,
                "total_tokens": prompt_tokens + 7,
            },
        }

    async def _stream(self, reply: Reply) -> AsyncIterator[bytes]:
        pieces = reply.chunks if reply.chunks is not None else re.findall(r"\S+\s*", reply.content)
        base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": self.model}
        for piece in pieces:
            chunk = {**base, "choices": [{"index": 0, "delta": {"content": piece}}]}
            yield f"data: {json.dumps(chunk)}\n\n".encode()
            await asyncio.sleep(0)
        done = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        yield f"data: {json.dumps(done)}\n\n".encode()
        usage = {
            **base,
            "choices": [],
            "usage": {
                "prompt_tokens": 20,
                "completion_tokens": len(pieces),
                "total_tokens": 20 + len(pieces),
            },
        }
        yield f"data: {json.dumps(usage)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    async def _models(self, request: Request) -> Response:
        return JSONResponse(
            {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "test"}]}
        )

    def start(self) -> ScriptedOpenAI:
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._completions, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # As in the gateway: without it every reply waits ~40 ms on a delayed ACK.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("scripted OpenAI server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
