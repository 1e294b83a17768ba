"""The runs of an executor process append over one EventService.AppendStream call."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from services.events.__main__ import build as build_events
from services.executor.log.emitter import EventEmitter
from services.executor.ports import RunRequest
from shuttle.events_client import EventsClient
from shuttle.grpc_client import open_channel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.metrics import APPEND_STREAMS
from shuttle.settings import Settings
from shuttle.v1 import events_pb2_grpc
from shuttle.workflow_log import EventDraft
from tests.executor.conftest import TENANT, Backends, read_log, types_of
from tests.executor.test_command_feed import calls_ended, gauge
from tests.support.holding_model import until
from tests.support.scripted_openai import ScriptedOpenAI, text

RUNS = 3


def unary_appends() -> float:
    """Append calls the events service of this process has answered."""
    return calls_ended("/shuttle.v1.EventService/Append")


async def test_the_runs_of_a_process_append_over_one_call(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(*[text("Nothing to compute.") for _ in range(2 * RUNS)])
    streams, appends = gauge(APPEND_STREAMS), unary_appends()
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
    assert unary_appends() == appends
    await runs.shutdown()


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
