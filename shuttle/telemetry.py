"""Tracing for every process: an OpenTelemetry TracerProvider, OTLP export when configured.
The gRPC interceptors that carry one trace across all services are in `grpc_tracing`."""

from __future__ import annotations

import contextvars

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, Sampler
from opentelemetry.trace import NonRecordingSpan

from shuttle.settings import Settings

# Services decide on export one by one (OTEL_TRACES_EXPORTER per process), so the sampled
# flag a call carries says whether its caller exports, not whether the trace is wanted:
# - a process that exports nothing records only under a caller that samples, so that the
#   flag reaches the exporting services behind it unchanged (nothing otherwise);
# - an exporting process samples every trace, also under a caller that exports nothing
#   (the SDK's parent-based default would drop its spans there).
NOT_EXPORTING: Sampler = ParentBased(root=ALWAYS_OFF)
EXPORTING: Sampler = ParentBased(root=ALWAYS_ON, remote_parent_not_sampled=ALWAYS_ON)


def configure_tracing(settings: Settings, service: str) -> TracerProvider:
    """Install this process's provider (see `tracer_provider`)."""
    provider = tracer_provider(settings, service)
    trace.set_tracer_provider(provider)
    return provider


def tracer_provider(settings: Settings, service: str) -> TracerProvider:
    """Spans always carry trace ids (event envelopes and log lines name them, and calls pass
    them on); they are recorded and leave the process only when OTLP export is configured.
    Recording spans nobody exports cost every RPC a fifth of a millisecond of CPU."""
    resource = Resource.create({"service.name": settings.otel_service_name or f"shuttle-{service}"})
    if not settings.exports_traces:
        return TracerProvider(resource=resource, sampler=NOT_EXPORTING)
    if settings.otel_traces_sampler:
        provider = TracerProvider(resource=resource)  # the SDK reads OTEL_TRACES_SAMPLER
    else:
        provider = TracerProvider(resource=resource, sampler=EXPORTING)
    exporter = OTLPSpanExporter(endpoint=settings.otel_exporter_otlp_endpoint or None)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def shutdown_tracing() -> None:
    """Flush what the batch processor still holds (on a clean stop)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.shutdown()


def current_trace_id() -> str:
    """The active trace id as 32 hex digits, or "" outside any span."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


def background_context() -> contextvars.Context:
    """A copy of the current context for a long-lived task started by a request. The task
    keeps the trace (its spans are children of the request's span) but only a reference to
    the request's span: the span itself, with its attributes, is freed when the request ends
    rather than when the task does."""
    context = contextvars.copy_context()
    span_context = trace.get_current_span().get_span_context()
    if span_context.is_valid:
        reference = trace.set_span_in_context(NonRecordingSpan(span_context))
        context.run(otel_context.attach, reference)
    return context


tracer = trace.get_tracer("shuttle")
