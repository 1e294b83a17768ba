"""The gRPC interceptors that carry one trace across all services.

They are OpenTelemetry's, with one shortcut written here because the library has none: in a
process that exports nothing, a unary call made or served under a trace its caller does not
sample gets a span that no one records, yet the library still builds it (ids, attributes, a
proxy of the servicer context, and on the client a wait for the call's status). On a unary
call the library's interceptors cost 0.13 ms of CPU on each side; this shortcut saves about
0.06 ms of it on each (`python -m bench.suites.grpc_tracing`). For those calls the trace context is
only passed on: the client sends its current context and the server makes the caller's its
own, so trace ids in events and log lines stay the same. Every other call (a sampled trace, a
call with no trace yet, a process that exports) goes through the library's interceptors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.grpc import aio_client_interceptors, aio_server_interceptor
from opentelemetry.propagate import extract, inject
from opentelemetry.trace import SpanContext, TracerProvider

from shuttle.grpc_handlers import Behaviour, MethodHandler, with_behaviour
from shuttle.telemetry import NOT_EXPORTING

# Untraced calls: health checks (every few seconds per probe: their spans would drown real
# traffic), and the streams a process holds open for many runs (a span would last as long
# and belong to no run; AppendStream gives each batch a span of its run's trace itself).
_UNTRACED = (
    "/grpc.health.v1.Health/",
    "/shuttle.v1.EventService/FollowCommands",
    "/shuttle.v1.EventService/AppendStream",
)
_UNTRACED_BYTES = tuple(prefix.encode() for prefix in _UNTRACED)


def traced(details: Any) -> bool:
    """The interceptors' filter. The library's `health_check()` filter normalises the method
    path through os.path on every call: a twentieth of the events service's busy time under a
    stream of Appends (py-spy). The path is already "/package.Service/Method"."""
    method = details.method
    if isinstance(method, bytes):  # some grpc versions give clients bytes
        return not method.startswith(_UNTRACED_BYTES)
    return not str(method).startswith(_UNTRACED)


def unrecorded(span_context: SpanContext, provider: TracerProvider | None = None) -> bool:
    """Whether a span under `span_context` would be recorded by no one: the trace is not
    sampled, and the provider (this process's by default) exports nothing."""
    return _unsampled(span_context) and _exports_nothing(provider)


def _unsampled(span_context: SpanContext) -> bool:
    return span_context.is_valid and not span_context.trace_flags.sampled


def _exports_nothing(provider: TracerProvider | None) -> bool:
    """Whether the provider samples only under a sampled parent, as it does when it exports
    nothing."""
    return getattr(provider or trace.get_tracer_provider(), "sampler", None) is NOT_EXPORTING


class ServerTracing(grpc.aio.ServerInterceptor):
    def __init__(self, provider: TracerProvider | None = None) -> None:
        self._provider = provider
        self._library = aio_server_interceptor(  # type: ignore[no-untyped-call]
            tracer_provider=provider, filter_=traced
        )

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[MethodHandler | None]],
        details: grpc.HandlerCallDetails,
    ) -> MethodHandler | None:
        # The provider first: a process that exports needs no look at the caller's trace.
        if traced(details) and _exports_nothing(self._provider):
            caller = extract(dict(details.invocation_metadata or ()))
            if _unsampled(trace.get_current_span(caller).get_span_context()):
                handler = await continuation(details)
                return with_behaviour(
                    handler, lambda b: _unary_under(caller, b), lambda b: _stream_under(caller, b)
                )
        return await self._library.intercept_service(continuation, details)  # type: ignore[no-any-return]


def _unary_under(caller: Context, behaviour: Behaviour) -> Behaviour:
    async def handle(request: Any, context: Any) -> Any:
        token = otel_context.attach(caller)
        try:
            return await behaviour(request, context)
        finally:
            otel_context.detach(token)

    return handle


def _stream_under(caller: Context, behaviour: Behaviour) -> Behaviour:
    async def handle(request: Any, context: Any) -> AsyncIterator[Any]:
        token = otel_context.attach(caller)
        try:
            async for message in behaviour(request, context):
                yield message
        finally:
            otel_context.detach(token)

    return handle


class _UnaryClientTracing(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(
        self, library: grpc.aio.UnaryUnaryClientInterceptor, provider: TracerProvider | None
    ) -> None:
        self._library = library
        self._provider = provider

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Any],
        details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        current = trace.get_current_span().get_span_context()
        if traced(details) and unrecorded(current, self._provider):
            return await continuation(_with_current_trace(details), request)
        return await self._library.intercept_unary_unary(continuation, details, request)


def _with_current_trace(details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
    carrier: dict[str, str] = {}
    inject(carrier)
    metadata = grpc.aio.Metadata(*tuple(details.metadata or ()), *carrier.items())
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


def server_interceptors(provider: TracerProvider | None = None) -> list[grpc.aio.ServerInterceptor]:
    """The tracing interceptor of a server; `provider` defaults to this process's."""
    return [ServerTracing(provider)]


def client_interceptors(provider: TracerProvider | None = None) -> list[Any]:
    """The tracing interceptors of a channel; `provider` defaults to this process's."""
    library = aio_client_interceptors(  # type: ignore[no-untyped-call]
        tracer_provider=provider, filter_=traced
    )
    return [
        _UnaryClientTracing(i, provider)
        if isinstance(i, grpc.aio.UnaryUnaryClientInterceptor)
        else i
        for i in library
    ]
