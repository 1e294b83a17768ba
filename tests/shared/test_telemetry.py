"""Trace ids without recording: a process that exports nothing still names and passes on
its traces, while its spans cost no recording."""

from __future__ import annotations

import pytest
from opentelemetry.context import Context
from opentelemetry.propagate import extract, inject

from shuttle.settings import Settings
from shuttle.telemetry import current_trace_id, tracer_provider


def test_without_export_spans_carry_trace_ids_but_are_not_recorded() -> None:
    provider = tracer_provider(Settings(otel_traces_exporter="none"), "test")
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        assert not request.is_recording()
        trace_id = request.get_span_context().trace_id
        assert request.get_span_context().is_valid
        assert current_trace_id() == format(trace_id, "032x")
        with tracer.start_as_current_span("call") as call:
            assert call.get_span_context().trace_id == trace_id
            headers: dict[str, str] = {}
            inject(headers)
    # What the next service receives continues the same trace.
    assert headers["traceparent"].split("-")[1] == format(trace_id, "032x")
    provider.shutdown()


EXPORTING_SETTINGS = Settings(
    otel_traces_exporter="otlp", otel_exporter_otlp_endpoint="http://127.0.0.1:9"
)


def test_with_export_spans_are_recorded() -> None:
    provider = tracer_provider(EXPORTING_SETTINGS, "test")
    span = provider.get_tracer("test").start_span("request")  # never ended: nothing to send
    assert span.is_recording()
    assert span.get_span_context().is_valid
    provider.shutdown()


def remote_parent(sampled: bool) -> Context:
    """The context a server extracts from a caller's traceparent."""
    flags = "01" if sampled else "00"
    return extract({"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-{flags}"})


def test_without_export_a_sampling_caller_s_flag_is_passed_on() -> None:
    # gateway (exports) -> executor (exports nothing) -> events (exports): the events
    # service must still see a sampled caller.
    provider = tracer_provider(Settings(otel_traces_exporter="none"), "test")
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("handler", context=remote_parent(sampled=True)) as span:
        assert span.get_span_context().trace_flags.sampled
        headers: dict[str, str] = {}
        inject(headers)
    assert headers["traceparent"].endswith("-01")
    with tracer.start_as_current_span("handler", context=remote_parent(sampled=False)) as span:
        assert not span.is_recording()
    provider.shutdown()


def test_with_export_spans_under_a_caller_that_exports_nothing_are_sampled() -> None:
    # gateway (exports nothing) -> executor (exports): the executor's spans are wanted.
    provider = tracer_provider(EXPORTING_SETTINGS, "test")
    span = provider.get_tracer("test").start_span("handler", context=remote_parent(False))
    assert span.is_recording()
    assert span.get_span_context().trace_flags.sampled
    assert format(span.get_span_context().trace_id, "032x") == "ab" * 16
    provider.shutdown()


def test_a_configured_sampler_replaces_shuttle_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
    settings = EXPORTING_SETTINGS.model_copy(
        update={"otel_traces_sampler": "parentbased_always_on"}
    )
    provider = tracer_provider(settings, "test")
    span = provider.get_tracer("test").start_span("handler", context=remote_parent(False))
    assert not span.is_recording()  # the SDK's parent-based sampler follows the caller
    provider.shutdown()
