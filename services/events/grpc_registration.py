"""EventService on a gRPC server, registered from its descriptor rather than the generated
`add_EventServiceServicer_to_server`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message_factory import GetMessageClass

from .wire import SERVICE, SERVICE_NAME

_HANDLER_KINDS: dict[tuple[bool, bool], Callable[..., grpc.RpcMethodHandler[Any, Any]]] = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}
# The streaming RPCs whose handlers yield messages already serialized.
_PRE_ENCODED = frozenset({"Stream", "StreamBatches"})


def add_to_server(servicer: object, server: grpc.aio.Server) -> None:
    """Register EventService on `server`, with handlers built from the service descriptor:
    each RPC is answered by `servicer`'s method of the same name.

    Not the generated add_EventServiceServicer_to_server: it fixes each response's
    serializer to the message class's, whereas Stream and StreamBatches hand gRPC bytes
    encoded once per event for all subscribers; their serializer passes the bytes through.
    """
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in SERVICE.methods:
        request_class = GetMessageClass(method.input_type)
        serialize: Callable[[Any], bytes] = (
            _as_is
            if method.name in _PRE_ENCODED
            else GetMessageClass(method.output_type).SerializeToString
        )
        make = _HANDLER_KINDS[method.client_streaming, method.server_streaming]
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=request_class.FromString,
            response_serializer=serialize,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


def _as_is(message: bytes) -> bytes:
    return message
