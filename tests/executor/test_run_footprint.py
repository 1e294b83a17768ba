"""What an in-flight run holds: shared catalog definitions, no finished request span."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from shuttle.telemetry import background_context
from tests.executor.conftest import Backends


async def test_runs_listing_the_same_catalog_share_its_decoded_definitions(
    backends: Backends,
) -> None:
    first = await backends.tools.list_tools("acme")
    second = await backends.tools.list_tools("acme")

    assert [d.name for d in first] == [d.name for d in second]
    assert "calculator" in [d.name for d in first]
    for one, other in zip(first, second, strict=True):
        assert one is other
        assert one.as_openai_tool() is other.as_openai_tool()
    calculator = next(d for d in first if d.name == "calculator")
    schema = calculator.as_openai_tool()
    assert schema["function"]["name"] == "calculator"
    assert schema["function"]["parameters"] == dict(calculator.parameters)


def test_a_background_task_keeps_the_trace_but_not_the_request_span() -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("request") as request_span:
        context = background_context()

    in_task = context.run(trace.get_current_span)
    assert in_task is not request_span
    assert not in_task.is_recording()
    assert in_task.get_span_context() == request_span.get_span_context()
    with tracer.start_as_current_span("child", context=None) as child:
        pass
    child_in_task = context.run(tracer.start_span, "child")
    assert isinstance(child_in_task, ReadableSpan)
    assert child_in_task.get_span_context().trace_id == request_span.get_span_context().trace_id
    assert child_in_task.parent is not None
    assert child_in_task.parent.span_id == request_span.get_span_context().span_id
    child_in_task.end()
    assert child.get_span_context().trace_id != request_span.get_span_context().trace_id


def test_outside_any_span_a_background_task_has_no_trace() -> None:
    context = background_context()

    assert not context.run(trace.get_current_span).get_span_context().is_valid
