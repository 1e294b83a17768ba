"""One task is one trace: all five processes export to an OTLP receiver the test runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.models import arithmetic_model
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.sse import Frame, read_stream
from tests.support.stack import start_stack

pytestmark = pytest.mark.integration

SERVICES = {
    "shuttle-gateway",
    "shuttle-executor",
    "shuttle-planner",
    "shuttle-tools",
    "shuttle-events",
}


def exporting_to(receiver: OtlpReceiver) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }


def one_task(tmp_path: Path, **stack_options: Any) -> list[Frame]:
    """A one-tool task through the five processes: its SSE frames. Every process is stopped
    cleanly before this returns, which flushes their spans."""
    model = ScriptedOpenAI(handler=arithmetic_model).start()
    stack = start_stack(tmp_path, model.base_url, **stack_options)
    try:
        created = httpx.post(
            f"{stack.gateway}/api/v1/tasks", json={"query": "What is 12*7?"}, timeout=30
        ).json()
        status, frames = read_stream(
            stack.gateway, f"/api/v1/stream/sse?workflow_id={created['workflow_id']}"
        )
        assert status == 200 and frames[-1].event == "STREAM_END"
        return frames
    finally:
        stack.stop()
        model.stop()


def test_one_task_is_one_trace_across_every_service(tmp_path: Path) -> None:
    receiver = OtlpReceiver().start()
    try:
        frames = one_task(tmp_path, extra_env=exporting_to(receiver))
    finally:
        receiver.stop()

    roots = [s for s in receiver.spans if s.name == "POST /api/v1/tasks"]
    assert len(roots) == 1, [s.name for s in receiver.spans]
    trace_id = roots[0].trace_id
    in_trace = [s for s in receiver.spans if s.trace_id == trace_id]
    assert {s.service for s in in_trace} == SERVICES

    # Every span hangs off another span of the same trace, up to the gateway's request.
    ids = {s.span_id for s in in_trace}
    orphans = [s for s in in_trace if s.parent_span_id not in ids and s is not roots[0]]
    assert not orphans, [(s.service, s.name) for s in orphans]

    llm_spans = [s for s in in_trace if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(llm_spans) == 3  # tool call, answer, streamed synthesis
    for span in llm_spans:
        assert span.attributes["gen_ai.request.model"] == "scripted-model"
        assert span.attributes["gen_ai.usage.output_tokens"] > 0
        assert span.attributes["gen_ai.response.finish_reasons"]
    (tool_span,) = [s for s in in_trace if s.name == "execute_tool calculator"]
    assert tool_span.attributes["gen_ai.tool.name"] == "calculator"
    assert tool_span.attributes["shuttle.tool.blocked"] is False

    # The envelope of every event names the trace it belongs to.
    assert {f.envelope["trace_id"] for f in frames} == {trace_id}
    assert not [s for s in receiver.spans if "Health" in s.name]


def test_services_that_export_keep_their_spans_under_callers_that_do_not(
    tmp_path: Path,
) -> None:
    # Export turned on for the executor and the events service only: the gateway's call
    # arrives unsampled, and the spans behind it must still reach the receiver as one trace.
    receiver = OtlpReceiver().start()
    exporting = exporting_to(receiver)
    try:
        frames = one_task(tmp_path, process_env={"executor": exporting, "events": exporting})
    finally:
        receiver.stop()

    (trace_id,) = {f.envelope["trace_id"] for f in frames}
    in_trace = [s for s in receiver.spans if s.trace_id == trace_id]
    assert {s.service for s in in_trace} == {"shuttle-executor", "shuttle-events"}
    # The executor's batches are its spans' children on the events service's side.
    executor_spans = {s.span_id for s in in_trace if s.service == "shuttle-executor"}
    appends = [s for s in in_trace if s.name == "/shuttle.v1.EventService/AppendStream"]
    assert appends and all(s.parent_span_id in executor_spans for s in appends)
