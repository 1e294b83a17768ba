"""Trace ids without recording: a process that exports nothing still names and passes on
its traces, while its spans cost no recording."""

from __future__ import annotations

from opentelemetry.propagate import inject

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


def test_with_export_spans_are_recorded() -> None:
    settings = Settings(
        otel_traces_exporter="otlp", otel_exporter_otlp_endpoint="http://127.0.0.1:9"
    )
    provider = tracer_provider(settings, "test")
    span = provider.get_tracer("test").start_span("request")  # never ended: nothing to send
    assert span.is_recording()
    assert span.get_span_context().is_valid
    provider.shutdown()
