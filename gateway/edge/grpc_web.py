"""grpc-web, the browser's gRPC: the allow-listed shuttle.v1 methods, over HTTP/1.1 or 2.

The gateway speaks grpc-web itself (with the semantics of Envoy's grpc_web filter) rather
than leave it to a proxy, because a grpc-web call is a tenant's call: it must be
authenticated by the tenant's key, bounded like any request body, held to the methods a
browser needs (`grpc_web_methods.py`), scoped to the caller's tenant and stream ticket, and
a run it starts must go through the task API's path. A proxy in front of the backends sees
none of that.

Forwarded requests are decoded to set their `tenant_id` (and any field the gateway owns),
then passed on as bytes through generic `unary_unary`/`unary_stream` calls; replies stream
back as frames ending with the 0x80 trailer frame. Errors before the call are trailers-only
responses, errors after it go into the trailer frame. A client that disconnects cancels the
upstream call.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from gateway.backends import Backends
from gateway.edge.body_limit import frame_too_large, too_large
from gateway.edge.grpc_web_framing import (
    MESSAGE_FLAG,
    TRAILER_FLAG,
    Frame,
    FrameDecoder,
    FrameTooLarge,
    FramingError,
    WebContentType,
    encode_frame,
    parse_content_type,
    parse_timeout,
    single_message,
    trailer_block,
)
from gateway.edge.grpc_web_messages import decode_request, encode_reply, reencode_reply
from gateway.edge.grpc_web_methods import PACKAGE, SERVICE_BACKENDS, Serving, WebMethod, web_method
from gateway.edge.grpc_web_start import follow_run, start_run
from gateway.edge.grpc_web_status import RpcRefusal, trailers_only
from gateway.edge.tenancy import Caller, caller_of, stream_caller_of, tenant_for_workflow
from gateway.errors import ApiError
from shuttle.grpc_client import TENANT_METADATA_KEY
from shuttle.settings import Settings

log = logging.getLogger(__name__)

# Request headers that describe the HTTP exchange or the caller's credentials, or that the
# gateway consumes itself, never forwarded as gRPC metadata (the tenant travels in its own
# header, set by the gateway).
_NOT_METADATA = {
    "host", "content-type", "content-length", "connection", "accept", "accept-encoding",
    "accept-language", "user-agent", "origin", "referer", "x-grpc-web", "x-user-agent",
    "grpc-timeout", "authorization", "x-api-key", "cookie", "te", "keep-alive",
    "transfer-encoding", "upgrade", "pragma", "cache-control", "priority", "idempotency-key",
}  # fmt: skip
# Metadata Shuttle's components set for one another (x-shuttle-tenant, ...): never a caller's.
_INTERNAL_METADATA_PREFIX = "x-shuttle-"
DEADLINE_PASSED = "the call's grpc-timeout passed before it ended"


class GrpcWebProxy:
    """The ASGI endpoint for `POST /shuttle.v1.<Service>/<Method>`."""

    def __init__(self) -> None:
        self.active_calls = 0
        """Calls in flight; tests watch it fall back to 0 after a disconnect."""

    async def handle(self, request: Request) -> Response:
        content_type = parse_content_type(request.headers.get("content-type", ""))
        if content_type is None:
            return Response(
                "grpc-web expects Content-Type application/grpc-web(-text)(+proto|+json)\n",
                status_code=415,
                media_type="text/plain",
            )
        service, name = request.path_params["service"], request.path_params["method"]
        try:
            served, method = web_method(service, name)
            caller = await (stream_caller_of if served.ticket_reads else caller_of)(request)
            grpc_timeout = _timeout(request)  # a malformed one is refused before the body is read
            settings: Settings = request.app.state.settings
            raw = await _request_message(
                request, content_type.text, settings.gateway_max_body_bytes
            )
            message = decode_request(method.input_type, raw, content_type)
            _scope_to_caller(message, served, caller)
            if served.serving is Serving.FORWARD:
                return self._forward(
                    request, service, method, message, caller, content_type, grpc_timeout
                )
            return await self._start(request, served, message, caller, content_type, grpc_timeout)
        except ApiError as exc:
            refusal = RpcRefusal.from_api_error(exc)
            return trailers_only(content_type, refusal.code, refusal.message, refusal.headers)
        except RpcRefusal as exc:
            return trailers_only(content_type, exc.code, exc.message, exc.headers)
        except FramingError as exc:
            return trailers_only(content_type, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except TimeoutError:
            return trailers_only(content_type, grpc.StatusCode.DEADLINE_EXCEEDED, DEADLINE_PASSED)

    def _forward(
        self,
        request: Request,
        service: str,
        method: MethodDescriptor,
        message: Message,
        caller: Caller,
        content_type: WebContentType,
        grpc_timeout: float | None,
    ) -> Response:
        backends: Backends = request.app.state.backends
        channel = backends.channels[SERVICE_BACKENDS[service]]
        path = f"/{PACKAGE}.{service}/{method.name}"
        metadata = (*forwarded_metadata(request), (TENANT_METADATA_KEY, caller.tenant_id))
        # No serializers: the reply bytes pass through untouched.
        factory: Any = channel.unary_stream if method.server_streaming else channel.unary_unary
        call: Any = factory(path)(
            message.SerializeToString(), timeout=grpc_timeout, metadata=metadata
        )
        return _streaming(self._relay(call, method, content_type), content_type)

    async def _start(
        self,
        request: Request,
        served: WebMethod,
        message: Message,
        caller: Caller,
        content_type: WebContentType,
        grpc_timeout: float | None,
    ) -> Response:
        deadline = (
            None if grpc_timeout is None else asyncio.get_running_loop().time() + grpc_timeout
        )
        async with asyncio.timeout_at(deadline):
            started = await start_run(request, caller, message)  # type: ignore[arg-type]
        reply = encode_reply(started.reply, content_type)
        if served.serving is Serving.START:
            return _streaming(_single(reply, content_type.text), content_type, started.headers)
        backends: Backends = request.app.state.backends
        events = follow_run(backends, caller.tenant_id, started.reply.workflow_id)
        return _streaming(
            self._relay_run(events, content_type, deadline), content_type, started.headers
        )

    async def _relay(
        self, call: Any, method: MethodDescriptor, content_type: WebContentType
    ) -> AsyncIterator[bytes]:
        self.active_calls += 1
        text = content_type.text
        try:
            try:
                if method.server_streaming:
                    async for reply in call:
                        body = reencode_reply(reply, method.output_type, content_type)
                        yield encode_frame(MESSAGE_FLAG, body, text)
                else:
                    reply = await call
                    body = reencode_reply(reply, method.output_type, content_type)
                    yield encode_frame(MESSAGE_FLAG, body, text)
                code, details = grpc.StatusCode.OK, ""
            except grpc.aio.AioRpcError as exc:
                code, details = exc.code(), exc.details() or ""
            metadata = [
                *(await call.initial_metadata() or ()),
                *(await call.trailing_metadata() or ()),
            ]
            yield encode_frame(TRAILER_FLAG, trailer_block(code.value[0], details, metadata), text)
        finally:
            # Reached on normal end and when the client disconnects (the response task is
            # cancelled): either way the upstream call must not outlive the request.
            call.cancel()
            self.active_calls -= 1

    async def _relay_run(
        self,
        events: AsyncGenerator[Message, None],
        content_type: WebContentType,
        deadline: float | None,
    ) -> AsyncIterator[bytes]:
        """The run's events as frames, then its status; closing it ends the events' call."""
        self.active_calls += 1
        text = content_type.text
        code, details = grpc.StatusCode.OK, ""
        try:
            while True:
                # The deadline bounds the waits for the log only: a timeout scope must not
                # span a yield, where the task runs code outside this generator.
                async with asyncio.timeout_at(deadline):
                    try:
                        event = await anext(events)
                    except StopAsyncIteration:
                        break
                yield encode_frame(MESSAGE_FLAG, encode_reply(event, content_type), text)
        except TimeoutError:
            code, details = grpc.StatusCode.DEADLINE_EXCEEDED, DEADLINE_PASSED
        except RpcRefusal as exc:
            code, details = exc.code, exc.message
        finally:
            await events.aclose()
            self.active_calls -= 1
        yield encode_frame(TRAILER_FLAG, trailer_block(code.value[0], details, ()), text)


def _scope_to_caller(message: Message, served: WebMethod, caller: Caller) -> None:
    """Set the fields the gateway owns: the tenant is always the caller's, and so is the
    decider of an approval; a stream ticket reads its own workflow only."""
    fields = message.DESCRIPTOR.fields_by_name
    if served.ticket_reads:
        tenant_for_workflow(caller, message.workflow_id)  # type: ignore[attr-defined]
    if "tenant_id" in fields:
        message.tenant_id = caller.tenant_id  # type: ignore[attr-defined]
    if served.decided_by_caller:
        message.decided_by = caller.key_id  # type: ignore[attr-defined]


def _timeout(request: Request) -> float | None:
    raw = request.headers.get("grpc-timeout")
    if raw is None:
        return None
    try:
        return parse_timeout(raw)
    except FramingError as exc:
        raise RpcRefusal(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None


def _streaming(
    frames: AsyncIterator[bytes],
    content_type: WebContentType,
    headers: dict[str, str] | None = None,
) -> StreamingResponse:
    return StreamingResponse(
        frames,
        media_type=content_type.response,
        headers={
            "grpc-accept-encoding": "identity",
            "Cache-Control": "no-cache",
            **(headers or {}),
        },
    )


async def _single(reply: bytes, text: bool) -> AsyncIterator[bytes]:
    yield encode_frame(MESSAGE_FLAG, reply, text)
    yield encode_frame(TRAILER_FLAG, trailer_block(grpc.StatusCode.OK.value[0], "", ()), text)


MAX_REQUEST_FRAMES = 8
"""A request is one message and perhaps a trailers frame; more is refused while it arrives."""


async def _request_message(request: Request, text: bool, limit: int) -> bytes:
    """The request message, decoded as the body arrives. A body over `limit` bytes is refused
    as soon as that is known (its Content-Length, a frame's header, or the bytes so far), so
    no more than `limit` bytes of it are ever held."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RpcRefusal(grpc.StatusCode.RESOURCE_EXHAUSTED, too_large(limit, int(declared)))
    decoder = FrameDecoder(text, max_length=limit)
    frames: list[Frame] = []
    received = 0
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > limit:
                raise RpcRefusal(grpc.StatusCode.RESOURCE_EXHAUSTED, too_large(limit))
            frames += decoder.feed(chunk)
            if len(frames) > MAX_REQUEST_FRAMES:
                raise FramingError(
                    f"expected exactly one request message, got {len(frames)} frames"
                )
    except FrameTooLarge as exc:
        raise RpcRefusal(
            grpc.StatusCode.RESOURCE_EXHAUSTED, frame_too_large(exc.length, limit)
        ) from None
    return single_message(frames + decoder.finish())


def forwarded_metadata(request: Request) -> list[tuple[str, str | bytes]]:
    found: list[tuple[str, str | bytes]] = []
    for key, value in request.headers.items():
        if key in _NOT_METADATA or key.startswith(
            ("sec-", "grpc-", "access-control-", ":", _INTERNAL_METADATA_PREFIX)
        ):
            continue
        if key.endswith("-bin"):
            try:
                found.append((key, base64.b64decode(value + "=" * (-len(value) % 4))))
            except ValueError:
                continue
        else:
            found.append((key, value))
    return found
