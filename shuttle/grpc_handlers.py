"""Rewrapping a gRPC method handler's behaviour, for the server interceptors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import grpc

# Quoted: the stubs make RpcMethodHandler generic, the runtime class is not.
MethodHandler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Behaviour: TypeAlias = Callable[[Any, Any], Any]
Wrap: TypeAlias = Callable[[Behaviour], Behaviour]


def with_behaviour(
    handler: MethodHandler | None, unary_response: Wrap, stream_response: Wrap
) -> MethodHandler | None:
    """`handler` with its behaviour wrapped: by `unary_response` where it answers once (a
    coroutine), by `stream_response` where it answers with a stream (an async generator)."""
    if handler is None:
        return None
    codecs: dict[str, Any] = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(unary_response(handler.unary_unary), **codecs)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(stream_response(handler.unary_stream), **codecs)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(unary_response(handler.stream_unary), **codecs)
    if handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(
            stream_response(handler.stream_stream), **codecs
        )
    return handler
