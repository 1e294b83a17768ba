"""What an in-flight run holds: shared catalog definitions, no finished request span, no
idle sender task."""

from __future__ import annotations

import asyncio
import gc
import weakref

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from services.executor.log.emitter import EventEmitter
from services.executor.ports import RunRequest
from shuttle.llm.openai_model import OpenAIModel
from shuttle.telemetry import background_context
from shuttle.v1 import events_pb2
from shuttle.workflow_log import EventDraft
from tests.executor.conftest import TENANT, Backends, as_dict, types_of
from tests.executor.test_control import gated_script
from tests.support.scripted_openai import ScriptedOpenAI


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


def emitter_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == "event-emitter" and not t.done()]


async def test_an_idle_emitter_holds_no_sender_and_later_bursts_go_on_in_order(
    backends: Backends,
) -> None:
    created = await backends.events.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(tenant_id=TENANT, query="idle emitter")
    )
    emitter = EventEmitter(backends.client.producer(created.workflow_id, TENANT, name="run"))

    for burst in range(3):
        for i in range(5):
            await emitter.emit(EventDraft("PROGRESS", f"burst {burst}", {"i": burst * 5 + i}))
        assert len(emitter_tasks()) == 1
        await emitter.flush()
        assert emitter_tasks() == []
        assert emitter.last_seq == burst * 5 + 5
    await emitter.close()

    events = (
        await backends.events.List(
            events_pb2.ListRequest(workflow_id=created.workflow_id, tenant_id=TENANT, limit=100)
        )
    ).events
    assert [as_dict(e)["payload"]["i"] for e in events] == list(range(15))
    assert [e.seq for e in events] == list(range(1, 16))


async def test_a_run_in_flight_does_not_keep_the_span_of_the_request_that_started_it(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    script, gate = gated_script()
    model.set_handler(script)
    llm = OpenAIModel(model.base_url, "test-key", "scripted-model", 10.0, 0)
    runs = backends.run_manager(llm, completion_check=False)
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("StartRun") as request_span:
        workflow_id = await runs.start(RunRequest(query="1+1, 2+2", tenant_id=TENANT))
        request_trace = request_span.get_span_context().trace_id
    request_span_ref = weakref.ref(request_span)
    del request_span
    try:
        assert await asyncio.to_thread(gate.reached.wait, 30)
        gc.collect()
        assert runs.active_runs == 1
        assert request_span_ref() is None
    finally:
        gate.release.set()
    assert types_of(await backends.read_log(workflow_id))[-1] == "STREAM_END"
    logged = await backends.events.List(
        events_pb2.ListRequest(workflow_id=workflow_id, tenant_id=TENANT, limit=1000)
    )
    # The run's events still belong to the request's trace.
    assert {e.trace_id for e in logged.events} == {format(request_trace, "032x")}
