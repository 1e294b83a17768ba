"""The real events service registered through one generic handler that counts the calls of
each method and can leave some out, as an older release without them answers UNIMPLEMENTED."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import Any, cast

import grpc

from services.events.__main__ import build as build_events
from shuttle.grpc_server import GrpcService
from shuttle.settings import Settings

Behaviour = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Any]]


class _Counting(grpc.GenericRpcHandler):
    def __init__(self, inner: grpc.GenericRpcHandler, release: EventsRelease) -> None:
        self._inner = inner
        self._release = release

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any] | None:
        name = str(details.method).rsplit("/", 1)[-1]
        self._release.calls[name] += 1
        if name in self._release.omit:
            return None
        handler = self._inner.service(details)
        if handler is None or not handler.response_streaming:
            return handler
        # On an aio server a streaming behaviour is an async generator function.
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._release.tracked(name, cast(Behaviour, handler.stream_stream)),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return grpc.unary_stream_rpc_method_handler(
            self._release.tracked(name, cast(Behaviour, handler.unary_stream)),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


class _Registration:
    """What `add_to_server` registers on: everything through the generic handler, which
    sees every call (registered method handlers would bypass it)."""

    def __init__(self, server: grpc.aio.Server, release: EventsRelease) -> None:
        self._server = server
        self._release = release

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(tuple(_Counting(h, self._release) for h in handlers))

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        pass


class EventsRelease:
    """`python -m services.events` without the methods in `omit`, counting calls by method
    (`calls`) and the streaming calls still open (`open`)."""

    def __init__(self, settings: Settings, omit: frozenset[str] = frozenset()) -> None:
        self.settings = settings
        self.omit = omit
        self.calls: Counter[str] = Counter()
        self.open: Counter[str] = Counter()
        self.port = 0
        self._service: GrpcService | None = None

    async def start(self, port: int = 0) -> int:
        built = await build_events(self.settings)
        register = built.register

        def counted(server: grpc.aio.Server) -> None:
            register(cast(grpc.aio.Server, _Registration(server, self)))

        self._service = replace(built, register=counted)
        self.port = await self._service.start("127.0.0.1", port)
        return self.port

    async def stop(self) -> None:
        if self._service is not None:
            await self._service.stop(0)
            self._service = None

    def tracked(self, name: str, behaviour: Behaviour) -> Behaviour:
        async def counted(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            self.open[name] += 1
            try:
                async for message in behaviour(request, context):
                    yield message
            finally:
                self.open[name] -= 1

        return counted
