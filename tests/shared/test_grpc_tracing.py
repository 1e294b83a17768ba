"""Trace context over real gRPC calls: a trace nobody records is passed on as it is, with no
spans built for it; a sampled trace, or a call with none, still gets the library's spans."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.propagate import extract
from opentelemetry.sdk.trace import TracerProvider

from shuttle.grpc_tracing import client_interceptors, server_interceptors
from shuttle.settings import Settings
from shuttle.telemetry import tracer_provider

UNARY = "/test.Probe/Unary"
STREAM = "/test.Probe/Stream"


def seen() -> bytes:
    """What the server's handler sees as its current span."""
    span = trace.get_current_span()
    context = span.get_span_context()
    return f"{context.trace_id:032x} {context.span_id:016x} {span.is_recording()}".encode()


async def unary(request: bytes, context: Any) -> bytes:
    return seen()


async def stream(request: bytes, context: Any) -> AsyncIterator[bytes]:
    yield seen()
    yield seen()


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    """A provider as in a process that exports nothing."""
    provider = tracer_provider(Settings(otel_traces_exporter="none"), "test")
    yield provider
    provider.shutdown()


async def call_both(provider: TracerProvider) -> tuple[bytes, list[bytes]]:
    server = grpc.aio.server(interceptors=server_interceptors(provider))
    handlers: dict[str, Any] = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Stream": grpc.unary_stream_rpc_method_handler(stream),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Probe", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", interceptors=client_interceptors(provider)
        ) as channel:
            call_unary: Any = channel.unary_unary(UNARY)
            call_stream: Any = channel.unary_stream(STREAM)
            answer: bytes = await call_unary(b"")
            messages: list[bytes] = [m async for m in call_stream(b"")]
            return answer, messages
    finally:
        await server.stop(None)


def caller(sampled: bool) -> Any:
    flags = "01" if sampled else "00"
    return extract({"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-{flags}"})


async def test_an_unrecorded_trace_reaches_the_handler_without_spans_in_between(
    provider: TracerProvider,
) -> None:
    with provider.get_tracer("test").start_as_current_span("run", context=caller(False)) as run:
        answer, messages = await call_both(provider)
    context = run.get_span_context()
    # The handler's current span is the caller's own: no client or server span was built.
    assert answer == f"{context.trace_id:032x} {context.span_id:016x} False".encode()
    # A stream's client keeps the library's (unrecorded) span; the server adds none to it.
    first, second = messages
    assert first == second
    assert first.decode().split()[::2] == [f"{context.trace_id:032x}", "False"]


async def test_a_sampled_trace_gets_the_library_s_spans(provider: TracerProvider) -> None:
    with provider.get_tracer("test").start_as_current_span("run", context=caller(True)) as run:
        answer, messages = await call_both(provider)
    context = run.get_span_context()
    for message in (answer, *messages):
        trace_id, span_id, recording = message.decode().split()
        assert trace_id == f"{context.trace_id:032x}"
        assert span_id != f"{context.span_id:016x}"  # the server's span, under the client's
        assert recording == "True"


async def test_a_call_with_no_trace_still_gets_one(provider: TracerProvider) -> None:
    answer, messages = await call_both(provider)
    for message in (answer, *messages):
        trace_id, _, recording = message.decode().split()
        assert trace_id != "0" * 32
        assert recording == "False"


async def test_an_exporting_process_records_spans_under_an_unsampled_caller() -> None:
    exporting = tracer_provider(
        Settings(otel_traces_exporter="otlp", otel_exporter_otlp_endpoint="http://127.0.0.1:9"),
        "test",
    )
    try:
        with exporting.get_tracer("test").start_as_current_span("run", context=caller(False)):
            answer, _ = await call_both(exporting)
    finally:
        exporting.shutdown()
    trace_id, _, recording = answer.decode().split()
    assert trace_id == "ab" * 16
    assert recording == "True"
