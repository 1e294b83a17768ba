"""The runs of an executor process append over one EventService.AppendStream call."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from services.events.__main__ import build as build_events
from services.executor.log.emitter import EventEmitter
from services.executor.ports import RunRequest
from shuttle.events_client import EventsClient
from shuttle.events_client.append_stream import AppendStream, AppendStreamBroken
from shuttle.grpc_client import open_channel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.metrics import APPEND_STREAMS
from shuttle.settings import Settings
from shuttle.v1 import events_pb2, events_pb2_grpc
from shuttle.workflow_log import EventDraft
from tests.executor.conftest import TENANT, Backends, read_log, types_of
from tests.executor.test_command_feed import calls_ended, gauge
from tests.support.holding_model import until
from tests.support.scripted_openai import ScriptedOpenAI, text

RUNS = 3


def unary_appends() -> float:
    """Append calls the events service of this process has answered."""
    return calls_ended("/shuttle.v1.EventService/Append")


def unary_creates() -> float:
    return calls_ended("/shuttle.v1.EventService/CreateWorkflow")


async def test_the_runs_of_a_process_create_and_append_over_one_call(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(*[text("Nothing to compute.") for _ in range(2 * RUNS)])
    streams, appends, creates = gauge(APPEND_STREAMS), unary_appends(), unary_creates()
    llm = OpenAIModel(model.base_url, "test-key", "scripted-model", 10.0, 0)
    runs = backends.run_manager(llm, completion_check=False, reflection_interval=0)
    started = [
        await runs.start(RunRequest(query="Say hello", tenant_id=TENANT)) for _ in range(RUNS)
    ]

    for workflow_id in started:
        events = await backends.read_log(workflow_id)
        assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert gauge(APPEND_STREAMS) == streams + 1
    assert (unary_appends(), unary_creates()) == (appends, creates)
    await runs.shutdown()


async def test_a_creation_over_the_stream_fails_as_the_unary_call_would(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, database_url="")
    events_service = await build_events(settings)
    port = await events_service.start("127.0.0.1", 0)
    channel = open_channel(f"127.0.0.1:{port}")
    client = EventsClient(channel)
    try:
        made = await client.create_workflow(TENANT, query="q", workflow_id="wf-1", over_stream=True)
        assert made == "wf-1"
        with pytest.raises(grpc.aio.AioRpcError) as taken:
            await client.create_workflow(TENANT, query="q", workflow_id="wf-1", over_stream=True)
        assert taken.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert "'wf-1' already exists" in str(taken.value.details())

        await events_service.stop(0)
        # Not resent within the producers' retry window: the first attempt's fate is unknown.
        with pytest.raises(grpc.aio.AioRpcError) as away:
            await client.create_workflow(TENANT, query="q", over_stream=True)
        assert away.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await client.close()
        await channel.close()
        await events_service.stop(0)


async def test_after_an_outage_the_batches_go_on_over_a_new_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(data_dir=tmp_path, database_url="")
    events_service = await build_events(settings)
    port = await events_service.start("127.0.0.1", 0)
    channel = open_channel(f"127.0.0.1:{port}")
    events = events_pb2_grpc.EventServiceStub(channel)
    client = EventsClient(channel)
    streams, appends = gauge(APPEND_STREAMS), unary_appends()
    try:
        workflow_id = await client.create_workflow(TENANT, query="q")
        producer = client.producer(workflow_id, TENANT, name="run", shared_stream=True)
        emitter = EventEmitter(producer)
        await emitter.emit(EventDraft("PROGRESS", "before"))
        await emitter.flush()
        assert gauge(APPEND_STREAMS) == streams + 1

        await events_service.stop(0)
        with caplog.at_level(logging.WARNING, logger="shuttle.events_client.producer"):
            await emitter.emit(EventDraft("PROGRESS", "during the outage"))
            await until(
                lambda: any("resending" in r.message for r in caplog.records),
                "the batch meets the outage",
            )
        events_service = await build_events(settings)
        await events_service.start("127.0.0.1", port)
        await emitter.flush()
        await emitter.emit(EventDraft("STREAM_END", "end"))
        await emitter.flush()
        logged = await read_log(events, workflow_id)
        assert [(e["seq"], e["message"]) for e in logged] == [
            (1, "before"),
            (2, "during the outage"),
            (3, "end"),
        ]
        # Every batch went over the stream (a new call after the outage), none call by call.
        assert unary_appends() == appends
        assert producer.batches == 3
    finally:
        await client.close()
        await channel.close()
        await events_service.stop(0)


async def never_answer(
    calls: AsyncIterator[events_pb2.AppendCall], _context: object
) -> AsyncIterator[events_pb2.AppendAnswer]:
    """AppendStream of an events service that hangs: it takes every call and answers none."""
    async for _ in calls:
        pass
    return
    yield  # an async generator


async def test_a_batch_or_creation_left_unanswered_fails_after_its_timeout() -> None:
    server = grpc.aio.server()
    handler = grpc.stream_stream_rpc_method_handler(
        never_answer,
        request_deserializer=events_pb2.AppendCall.FromString,
        response_serializer=events_pb2.AppendAnswer.SerializeToString,
    )
    service = events_pb2.DESCRIPTOR.services_by_name["EventService"].full_name
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service, {"AppendStream": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = open_channel(f"127.0.0.1:{port}")
    stream = AppendStream(events_pb2_grpc.EventServiceStub(channel))
    try:
        batch = events_pb2.AppendRequest(workflow_id="wf-1", tenant_id=TENANT)
        with pytest.raises(AppendStreamBroken, match="DEADLINE_EXCEEDED"):
            await stream.append(batch, timeout_seconds=0.2)
        creation = events_pb2.CreateWorkflowRequest(tenant_id=TENANT)
        with pytest.raises(AppendStreamBroken, match="DEADLINE_EXCEEDED"):
            await stream.create(creation, timeout_seconds=0.2)
    finally:
        await stream.close()
        await channel.close()
        await server.stop(0)
