"""An OpenAI-compatible HTTP server whose replies the test scripts.

It stands where the model provider would: the only part of the system we do not own.
Runs uvicorn in a background thread on a free loopback port.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.threaded_server import ThreadedServer


class AsciiJSONResponse(JSONResponse):
    """JSON escaped to ASCII, as many providers write it: it can carry a lone surrogate
    ("\\udce9"), which the UTF-8 JSON of Starlette's own response cannot."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content).encode()


@dataclass
class Reply:
    """One scripted answer: text, tool calls, or an HTTP error."""

    content: str = ""
    tool_calls: Sequence[tuple[str, str, dict[str, Any] | str]] = field(default_factory=list)
    """(id, name, arguments): an object, or text sent as the arguments exactly as written."""
    status: int = 200
    chunks: list[str] | None = None
    """For streamed calls: how the content is split into deltas (default: by word)."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra response headers, e.g. Retry-After on a 429."""
    delay: float = 0.0
    """Seconds to wait before answering (to exercise client timeouts)."""
    reasoning: str = ""
    """`reasoning_content`, as thinking models return it."""
    reuse_index_zero: bool = False
    """Streamed tool calls all carry index 0, as some providers send them."""
    usage: dict[str, Any] | None = None
    """Overrides the usage object of the reply."""
    error_code: str | None = None
    finish_reason: str = ""
    """Overrides the finish reason ("length": cut off at the output limit)."""
    body: Any = None
    """For calls not streamed: sent as the whole JSON body instead of a completion built from
    the fields above (a malformed or unusual provider reply)."""


def text(content: str, chunks: list[str] | None = None) -> Reply:
    return Reply(content=content, chunks=chunks)


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> Reply:
    return Reply(tool_calls=[(call_id, name, arguments)])


def error(
    status: int,
    message: str = "scripted failure",
    headers: dict[str, str] | None = None,
    code: str | None = None,
) -> Reply:
    return Reply(content=message, status=status, headers=headers or {}, error_code=code)


Handler = Callable[[dict[str, Any]], Reply]


def _arguments(args: dict[str, Any] | str) -> str:
    return args if isinstance(args, str) else json.dumps(args)


class ScriptedOpenAI:
    """Serves /v1/chat/completions and /v1/models from a script; records every request."""

    model = "scripted-model"

    def __init__(self, handler: Handler | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.latency_seconds = 0.0
        """How long every reply waits before it starts, like a real model's time to first token."""
        self.keep_alive_seconds = 5
        """How long an idle client connection stays open (uvicorn's default)."""
        self._queue: deque[Reply] = deque()
        self._handler = handler
        self._lock = threading.Lock()
        self._threaded: ThreadedServer | None = None
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
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200:
            payload = {
                "error": {"message": reply.content, "type": "scripted", "code": reply.error_code}
            }
            return AsciiJSONResponse(payload, status_code=reply.status, headers=reply.headers)
        if reply.body is not None:
            return AsciiJSONResponse(reply.body, headers=reply.headers)
        if body.get("stream"):
            return StreamingResponse(
                self._stream(reply), media_type="text/event-stream", headers=reply.headers
            )
        return AsciiJSONResponse(self._completion(reply, body), headers=reply.headers)

    def _completion(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": _arguments(args)},
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
                    "finish_reason": reply.finish_reason
                    or ("tool_calls" if reply.tool_calls else "stop"),
                }
            ],
            "usage": reply.usage
            or {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 7,
                "total_tokens": prompt_tokens + 7,
            },
        }

    async def _stream(self, reply: Reply) -> AsyncIterator[bytes]:
        pieces = reply.chunks if reply.chunks is not None else re.findall(r"\S+\s*", reply.content)
        base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": self.model}

        def frame(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return f"data: {json.dumps({**base, 'choices': [choice]})}\n\n".encode()

        if reply.reasoning:
            for piece in re.findall(r"\S+\s*", reply.reasoning):
                yield frame({"reasoning_content": piece})
        for piece in pieces:
            yield frame({"content": piece})
            await asyncio.sleep(0)
        for number, (call_id, name, args) in enumerate(reply.tool_calls):
            index = 0 if reply.reuse_index_zero else number
            opening = {"index": index, "id": call_id, "type": "function"}
            yield frame({"tool_calls": [{**opening, "function": {"name": name, "arguments": ""}}]})
            arguments = _arguments(args)
            middle = len(arguments) // 2
            for part in (arguments[:middle], arguments[middle:]):
                yield frame({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
        yield frame({}, reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop"))
        usage = {
            **base,
            "choices": [],
            "usage": reply.usage
            or {
                "prompt_tokens": 20,
                "completion_tokens": len(pieces),
                "total_tokens": 20 + len(pieces),
            },
        }
        yield f"data: {json.dumps(usage)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    async def _models(self, request: Request) -> Response:
        return AsciiJSONResponse(
            {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "test"}]}
        )

    def start(self) -> ScriptedOpenAI:
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._completions, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )
        self._threaded = ThreadedServer(
            app,
            lifespan="off",
            name="scripted OpenAI server",
            keep_alive_seconds=self.keep_alive_seconds,
        )
        self.port = self._threaded.start(timeout_seconds=10)
        return self

    def stop(self) -> None:
        if self._threaded is not None:
            self._threaded.stop()
