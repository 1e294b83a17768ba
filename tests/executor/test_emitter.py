"""The buffered emitter against the real events service: order, batching, a closed log, and
a run that outlives an events-service restart with nothing lost."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path

import pytest

from services.events.__main__ import build as build_events
from services.executor.adapters.events import GrpcWorkflowRegistry
from services.executor.adapters.tools import ToolClient
from services.executor.commands.feed import CommandFeed
from services.executor.log.emitter import EmitterFailed, EventEmitter
from services.executor.ports import RunRequest
from services.executor.runs import EmitterSettings, RunManager
from services.tools.__main__ import build as build_tools
from shuttle.events_client import EventsClient, Producer
from shuttle.grpc_client import open_channel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.settings import Settings
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc
from shuttle.workflow_log import AppendRefused, EventDraft, LogClosed, LogUnavailable
from tests.executor.conftest import (
    EVENT_WAIT_SECONDS,
    TENANT,
    Backends,
    agent_defaults,
    as_dict,
    types_of,
)
from tests.support.agent_model import AgentModel, answer, calc
from tests.support.scripted_openai import ScriptedOpenAI


async def new_workflow(backends: Backends) -> str:
    created = await backends.events.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(tenant_id=TENANT, query="emitter test")
    )
    return str(created.workflow_id)


async def test_many_events_land_in_order_in_few_batches(backends: Backends) -> None:
    workflow_id = await new_workflow(backends)
    sink = backends.client.producer(workflow_id, TENANT, name="run")
    emitter = EventEmitter(sink, batch_max=50)
    for i in range(500):
        await emitter.emit(EventDraft("PROGRESS", f"step {i}", {"i": i}))
    await emitter.close()

    events = (
        await backends.events.List(
            events_pb2.ListRequest(workflow_id=workflow_id, tenant_id=TENANT, limit=1000)
        )
    ).events
    assert [as_dict(e)["payload"]["i"] for e in events] == list(range(500))
    assert [e.seq for e in events] == list(range(1, 501))
    assert emitter.last_seq == 500
    assert 10 <= sink.batches < 500  # grouped, never larger than batch_max


async def log_of(backends: Backends, workflow_id: str) -> list[common_pb2.Event]:
    request = events_pb2.ListRequest(workflow_id=workflow_id, tenant_id=TENANT, limit=1000)
    return list((await backends.events.List(request)).events)


async def test_events_emitted_within_the_linger_share_one_append(backends: Backends) -> None:
    workflow_id = await new_workflow(backends)
    sink = backends.client.producer(workflow_id, TENANT, name="run")
    emitter = EventEmitter(sink, linger_seconds=2.0)
    for i in range(3):
        await emitter.emit(EventDraft("PROGRESS", f"step {i}", {"i": i}))
        await asyncio.sleep(0.02)  # time enough for an append of its own without the linger
    assert await log_of(backends, workflow_id) == []  # nothing leaves before the linger is over

    await asyncio.wait_for(_until_logged(backends, workflow_id, 3), EVENT_WAIT_SECONDS)
    assert sink.batches == 1
    await emitter.close()


async def _until_logged(backends: Backends, workflow_id: str, count: int) -> None:
    """Return once the log holds `count` events, as a subscriber sees them arrive."""
    request = events_pb2.StreamRequest(workflow_id=workflow_id, tenant_id=TENANT, from_seq=1)
    stream = backends.events.Stream(request)
    async for event in stream:
        if event.seq >= count:
            stream.cancel()
            return


async def test_a_flush_or_a_full_batch_does_not_wait_for_the_linger(backends: Backends) -> None:
    workflow_id = await new_workflow(backends)
    sink = backends.client.producer(workflow_id, TENANT, name="run")
    emitter = EventEmitter(sink, batch_max=2, linger_seconds=3600)
    await emitter.emit(EventDraft("PROGRESS", "flushed", {}))
    await asyncio.wait_for(emitter.flush(), EVENT_WAIT_SECONDS)
    assert [e.message for e in await log_of(backends, workflow_id)] == ["flushed"]

    await emitter.emit(EventDraft("PROGRESS", "first of a full batch", {}))
    await emitter.emit(EventDraft("PROGRESS", "second of a full batch", {}))
    await asyncio.wait_for(_until_logged(backends, workflow_id, 3), EVENT_WAIT_SECONDS)
    assert sink.batches == 2
    await asyncio.wait_for(emitter.close(), EVENT_WAIT_SECONDS)


async def test_events_queued_while_an_append_is_in_flight_linger_from_the_oldest(
    backends: Backends,
) -> None:
    workflow_id = await new_workflow(backends)
    sink = backends.client.producer(workflow_id, TENANT, name="run")
    emitter = EventEmitter(sink, linger_seconds=1.0)
    await emitter.emit(EventDraft("PROGRESS", "first", {}))
    await asyncio.wait_for(_until_logged(backends, workflow_id, 1), EVENT_WAIT_SECONDS)
    await emitter.emit(EventDraft("PROGRESS", "second", {}))
    await asyncio.sleep(0.1)
    await emitter.emit(EventDraft("PROGRESS", "third", {}))
    await asyncio.wait_for(_until_logged(backends, workflow_id, 3), EVENT_WAIT_SECONDS)
    assert sink.batches == 2  # the second and third went together
    await emitter.close()


async def test_a_runs_events_wait_out_the_linger_together(backends: Backends) -> None:
    script = AgentModel(calc("2*2"), calc("3*3"), answer("4 and 9"), synthesis="4 and 9.")
    model = ScriptedOpenAI(handler=script).start()
    llm = OpenAIModel(model.base_url, "test-key", "scripted-model", 10.0, 0)
    producers: list[Producer] = []

    def sink(workflow_id: str, tenant_id: str, _epoch: int) -> Producer:
        producers.append(backends.client.producer(workflow_id, tenant_id, name="run"))
        return producers[-1]

    try:
        runs = RunManager(
            registry=GrpcWorkflowRegistry(backends.client),
            sinks=sink,
            tools=backends.tools,
            llm=llm,
            settings=agent_defaults(),
            emitter=EmitterSettings(linger_seconds=3600),
        )
        log = await asyncio.wait_for(backends.run_to_end(runs, "2*2 and 3*3"), EVENT_WAIT_SECONDS)
    finally:
        await llm.close()
        model.stop()
    assert types_of(log).count("TOOL_OBSERVATION") == 2
    assert types_of(log)[-1] == "STREAM_END"
    # The run ended before the linger did: its close sent everything in one append...
    assert producers[0].batches == 1
    # ...and each event still carries when it happened, not when that append went.
    stamps = [e.timestamp.ToNanoseconds() for e in await log_of(backends, log[0]["workflow_id"])]
    assert stamps == sorted(stamps)
    assert len(set(stamps)) > 1


async def test_an_event_holding_a_lone_surrogate_is_stored_with_its_batch(
    backends: Backends,
) -> None:
    workflow_id = await new_workflow(backends)
    emitter = EventEmitter(backends.client.producer(workflow_id, TENANT, name="run"))
    await emitter.emit(EventDraft("PROGRESS", "before", {}))
    await emitter.emit(EventDraft("PROGRESS", "file \udce9", {"name": "caf\udce9"}, "a\ud800"))
    await emitter.emit(EventDraft("PROGRESS", "after", {}))
    await emitter.close()

    events = (
        await backends.events.List(
            events_pb2.ListRequest(workflow_id=workflow_id, tenant_id=TENANT)
        )
    ).events
    assert [e.message for e in events] == ["before", "file \ufffd", "after"]
    assert as_dict(events[1])["payload"] == {"name": "caf\udce9"}  # escaped, as JSON can
    assert events[1].agent_id == "a\ufffd"


async def test_large_events_queued_together_go_in_as_many_appends_as_the_log_needs(
    backends: Backends,
) -> None:
    workflow_id = await new_workflow(backends)
    sink = backends.client.producer(workflow_id, TENANT, name="run")
    emitter = EventEmitter(sink)
    # Queued before the first append leaves: 6 MiB, over the log's 4 MiB per append.
    for i in range(6):
        await emitter.emit(EventDraft("PROGRESS", f"part {i}", {"i": i, "text": "x" * 1_000_000}))
    await emitter.emit(EventDraft("PROGRESS", "small", {"i": 6}))
    await emitter.close()

    events = (
        await backends.events.List(
            events_pb2.ListRequest(workflow_id=workflow_id, tenant_id=TENANT)
        )
    ).events
    assert [as_dict(e)["payload"]["i"] for e in events] == list(range(7))
    assert [e.seq for e in events] == list(range(1, 8))
    assert sink.batches >= 2  # split, and nothing sent twice


async def test_a_log_closed_by_someone_else_accepts_our_stream_end_only(
    backends: Backends,
) -> None:
    workflow_id = await new_workflow(backends)
    other = EventEmitter(backends.client.producer(workflow_id, TENANT, name="run"))
    await other.emit(EventDraft("WORKFLOW_COMPLETED", "done", {"result": "x"}))
    await other.emit(EventDraft("STREAM_END", "end"))
    await other.close()

    ours = EventEmitter(backends.client.producer(workflow_id, TENANT, name="run"))
    await ours.emit(EventDraft("STREAM_END", "end"))
    await ours.flush()  # tolerated: the log already ended
    await ours.emit(EventDraft("PROGRESS", "late"))
    with pytest.raises(EmitterFailed, match="has ended"):
        await ours.flush()


async def wait_for_thinking(
    events: events_pb2_grpc.EventServiceAsyncStub, workflow_id: str, iteration: int
) -> None:
    stream = events.Stream(
        events_pb2.StreamRequest(workflow_id=workflow_id, tenant_id=TENANT, from_seq=1)
    )
    async for raw in stream:
        event = as_dict(raw)
        if event["type"] == "AGENT_THINKING" and event["payload"] == {
            "status": "start",
            "iteration": iteration,
        }:
            stream.cancel()
            return


async def test_a_run_survives_an_events_service_restart_with_nothing_lost(
    tmp_path: Path,
) -> None:
    # The model's prompts kept too, so that every seq is in the log after the restart.
    settings = Settings(
        data_dir=tmp_path,
        database_url="",
        tool_timeout_seconds=10,
        events_durable_llm_prompt=True,
    )
    events_service = await build_events(settings)
    events_port = await events_service.start("127.0.0.1", 0)
    tools_service = await build_tools(settings)
    tools_port = await tools_service.start("127.0.0.1", 0)
    events_channel = open_channel(f"127.0.0.1:{events_port}")
    tools_channel = open_channel(f"127.0.0.1:{tools_port}")
    events = events_pb2_grpc.EventServiceStub(events_channel)
    client = EventsClient(events_channel)
    reached, release = threading.Event(), threading.Event()

    def hold() -> None:
        reached.set()
        assert release.wait(30)

    held = calc("3*3")
    held.during = hold
    script = AgentModel(calc("2*2"), held, answer("4 and 9"), synthesis="4 and 9.")
    model = ScriptedOpenAI(handler=script).start()
    runs = RunManager(
        registry=GrpcWorkflowRegistry(client),
        sinks=lambda wf, tenant, _epoch: client.producer(wf, tenant, name="run"),
        tools=ToolClient(tools_channel, 10),
        llm=OpenAIModel(model.base_url, "test-key", "scripted-model", 10.0, 0),
        settings=agent_defaults(),
        commands=CommandFeed(client),
    )
    try:
        workflow_id = await runs.start(RunRequest(query="2*2 and 3*3", tenant_id=TENANT))
        assert await asyncio.to_thread(reached.wait, 30)
        # Nothing in flight at the stop: the events before the held call are all in the log.
        # (A batch cut off mid-flight is resent with its batch number, which a service that
        # honours idempotent appends answers without a duplicate.)
        await wait_for_thinking(events, workflow_id, iteration=2)
        await events_service.stop(0)
        release.set()  # the run goes on and must queue its events while the log is away
        assert await asyncio.to_thread(script.synthesising.wait, 30)
        events_service = await build_events(settings)
        await events_service.start("127.0.0.1", events_port)

        stream = events.Stream(
            events_pb2.StreamRequest(workflow_id=workflow_id, tenant_id=TENANT, from_seq=1),
            wait_for_ready=True,
        )
        log = [as_dict(e) async for e in stream]
    finally:
        model.stop()
        await events_channel.close()
        await tools_channel.close()
        await tools_service.stop(0)
        await events_service.stop(0)

    durable = [e for e in log if e["type"] != "THREAD_MESSAGE_DELTA"]
    counts = Counter(types_of(durable))
    assert counts["TOOL_INVOKED"] == counts["TOOL_OBSERVATION"] == 2
    assert counts["LLM_OUTPUT"] == 4  # three loop calls and the synthesis
    assert counts["AGENT_THINKING"] == 6
    for once in ("WORKFLOW_STARTED", "THREAD_MESSAGE_COMPLETED", "WORKFLOW_COMPLETED"):
        assert counts[once] == 1
    assert types_of(log)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    seqs = [e["seq"] for e in log]
    assert seqs == sorted(set(seqs)) and seqs[-1] == len(seqs)


def test_only_a_refusal_by_an_open_log_leaves_room_for_last_words() -> None:
    # An outage may last; a log someone else ended takes nothing more.
    assert EmitterFailed(AppendRefused("INVALID_ARGUMENT", "batch is too big")).refused
    assert not EmitterFailed(LogUnavailable("UNAVAILABLE")).refused
    assert not EmitterFailed(LogClosed("ended at seq 9")).refused
