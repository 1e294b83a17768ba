"""grpc-web for every shuttle.v1 service, translated to gRPC on the backends.

Our own translator, because Envoy (whose grpc_web filter defines the semantics followed here)
cannot be installed in this environment and the `sonora` library writes malformed trailer
frames. Requests are forwarded as raw bytes through generic `unary_unary`/`unary_stream`
calls; only a request message with a `tenant_id` field is decoded, to set it to the caller's
tenant. Replies stream back as frames ending with the 0x80 trailer frame; errors before the
call are trailers-only responses, errors after it go into the trailer frame. A client that
disconnects cancels the upstream call.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import MethodDescriptor
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from gateway.backends import Backends
from gateway.edge.grpc_web_framing import (
    MESSAGE_FLAG,
    TRAILER_FLAG,
    Frame,
    FrameDecoder,
    FramingError,
    WebContentType,
    encode_frame,
    parse_content_type,
    parse_timeout,
    percent_encode,
    single_message,
    trailer_block,
)
from gateway.edge.tenancy import caller_of
from gateway.errors import ApiError
from shuttle.grpc_client import TENANT_METADATA_KEY
from shuttle.v1 import events_pb2, executor_pb2, planner_pb2, tools_pb2  # noqa: F401  (registers)

log = logging.getLogger(__name__)

PACKAGE = "shuttle.v1"
SERVICE_BACKENDS = {
    "EventService": "events",
    "ExecutorService": "executor",
    "ToolService": "tools",
    "PlannerService": "planner",
}
_HTTP_TO_GRPC = {
    401: grpc.StatusCode.UNAUTHENTICATED,
    404: grpc.StatusCode.NOT_FOUND,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
}
# Request headers that describe the HTTP exchange or the caller's credentials, never
# forwarded as gRPC metadata (the tenant travels in its own header, set by the gateway).
_NOT_METADATA = {
    "host", "content-type", "content-length", "connection", "accept", "accept-encoding",
    "accept-language", "user-agent", "origin", "referer", "x-grpc-web", "x-user-agent",
    "grpc-timeout", "authorization", "x-api-key", "cookie", "te", "keep-alive",
    "transfer-encoding", "upgrade", "pragma", "cache-control", "priority", TENANT_METADATA_KEY,
}  # fmt: skip


class GrpcWebProxy:
    """The ASGI endpoint for `POST /shuttle.v1.<Service>/<Method>`."""

    def __init__(self) -> None:
        self._pool = descriptor_pool.Default()
        self.active_calls = 0
        """Upstream calls in flight; tests watch it fall back to 0 after a disconnect."""

    async def handle(self, request: Request) -> Response:
        content_type = parse_content_type(request.headers.get("content-type", ""))
        if content_type is None:
            return Response(
                "grpc-web expects Content-Type application/grpc-web(-text)(+proto|+json)\n",
                status_code=415,
                media_type="text/plain",
            )
        service, method_name = request.path_params["service"], request.path_params["method"]
        try:
            method = self._method(service, method_name)
            caller = await caller_of(request)
            timeout = self._timeout(request)
            raw = await _request_message(request, content_type.text)
            payload = self._prepare(method, raw, content_type, caller.tenant_id)
        except ApiError as exc:
            code = _HTTP_TO_GRPC.get(exc.status, grpc.StatusCode.INVALID_ARGUMENT)
            return trailers_only(content_type, code, exc.message, exc.headers)
        except _RpcRefusal as exc:
            return trailers_only(content_type, exc.code, exc.message)
        except FramingError as exc:
            return trailers_only(content_type, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        backends: Backends = request.app.state.backends
        channel = backends.channels[SERVICE_BACKENDS[service]]
        path = f"/{PACKAGE}.{service}/{method_name}"
        metadata = (*forwarded_metadata(request), (TENANT_METADATA_KEY, caller.tenant_id))
        # No serializers: the request and reply bytes pass through untouched.
        factory: Any = channel.unary_stream if method.server_streaming else channel.unary_unary
        call: Any = factory(path)(payload, timeout=timeout, metadata=metadata)
        return StreamingResponse(
            self._relay(call, method, content_type),
            media_type=content_type.response,
            headers={"grpc-accept-encoding": "identity", "Cache-Control": "no-cache"},
        )

    def _method(self, service: str, name: str) -> MethodDescriptor:
        if service not in SERVICE_BACKENDS:
            raise _RpcRefusal(grpc.StatusCode.UNIMPLEMENTED, f"unknown service {PACKAGE}.{service}")
        descriptor = self._pool.FindServiceByName(f"{PACKAGE}.{service}")
        method = descriptor.methods_by_name.get(name)
        if method is None:
            raise _RpcRefusal(
                grpc.StatusCode.UNIMPLEMENTED, f"unknown method {PACKAGE}.{service}/{name}"
            )
        if method.client_streaming:
            raise _RpcRefusal(
                grpc.StatusCode.UNIMPLEMENTED, "grpc-web cannot carry client-streaming calls"
            )
        return method

    @staticmethod
    def _timeout(request: Request) -> float | None:
        raw = request.headers.get("grpc-timeout")
        if raw is None:
            return None
        try:
            return parse_timeout(raw)
        except FramingError as exc:
            raise _RpcRefusal(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None

    def _prepare(
        self, method: MethodDescriptor, raw: bytes, content_type: WebContentType, tenant: str
    ) -> bytes:
        """The request bytes to forward, with `tenant_id` (when the message has one) set."""
        has_tenant = "tenant_id" in method.input_type.fields_by_name
        if content_type.codec == "proto" and not has_tenant:
            return raw
        message = message_factory.GetMessageClass(method.input_type)()
        try:
            if content_type.codec == "json":
                json_format.Parse(raw, message)
            else:
                message.ParseFromString(raw)
        except Exception as exc:
            raise _RpcRefusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"request is not a valid {method.input_type.full_name}: {exc}",
            ) from None
        if has_tenant:
            message.tenant_id = tenant  # type: ignore[attr-defined]
        return bytes(message.SerializeToString())

    async def _relay(
        self, call: Any, method: MethodDescriptor, content_type: WebContentType
    ) -> AsyncIterator[bytes]:
        self.active_calls += 1
        text = content_type.text
        try:
            try:
                if method.server_streaming:
                    async for reply in call:
                        yield encode_frame(
                            MESSAGE_FLAG, self._encode(reply, method, content_type), text
                        )
                else:
                    reply = await call
                    yield encode_frame(
                        MESSAGE_FLAG, self._encode(reply, method, content_type), text
                    )
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

    @staticmethod
    def _encode(reply: bytes, method: MethodDescriptor, content_type: WebContentType) -> bytes:
        if content_type.codec == "proto":
            return reply
        message = message_factory.GetMessageClass(method.output_type)()
        message.ParseFromString(reply)
        return json_format.MessageToJson(message, indent=None).encode()


MAX_REQUEST_FRAMES = 8
"""A request is one message and perhaps a trailers frame; more is refused while it arrives."""


async def _request_message(request: Request, text: bool) -> bytes:
    """The request message, decoded as the body arrives: an oversized one is never buffered."""
    decoder = FrameDecoder(text)
    frames: list[Frame] = []
    async for chunk in request.stream():
        frames += decoder.feed(chunk)
        if len(frames) > MAX_REQUEST_FRAMES:
            raise FramingError(f"expected exactly one request message, got {len(frames)} frames")
    return single_message(frames + decoder.finish())


class _RpcRefusal(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def trailers_only(
    content_type: WebContentType,
    code: grpc.StatusCode,
    message: str,
    extra: dict[str, str] | None = None,
) -> Response:
    headers = {
        "grpc-status": str(code.value[0]),
        "grpc-message": percent_encode(message),
        **(extra or {}),
    }
    return Response(b"", status_code=200, media_type=content_type.response, headers=headers)


def forwarded_metadata(request: Request) -> list[tuple[str, str | bytes]]:
    found: list[tuple[str, str | bytes]] = []
    for key, value in request.headers.items():
        if key in _NOT_METADATA or key.startswith(("sec-", "grpc-", "access-control-", ":")):
            continue
        if key.endswith("-bin"):
            try:
                found.append((key, base64.b64decode(value + "=" * (-len(value) % 4))))
            except ValueError:
                continue
        else:
            found.append((key, value))
    return found
