"""ExecutorService.Run follows the run's log across an events service restart: the caller
keeps its one stream and gets every event once, in seq order, up to STREAM_END."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import grpc

from services.events.__main__ import build as build_events
from shuttle.envelope import type_name
from shuttle.grpc_client import open_channel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.settings import Settings
from shuttle.v1 import common_pb2, events_pb2_grpc, executor_pb2
from tests.executor.conftest import TENANT, running_backends
from tests.support.holding_model import HoldingModel, until


async def test_a_run_streamed_over_run_survives_an_events_restart(
    tmp_path: Path, holding_model: HoldingModel
) -> None:
    settings = Settings(data_dir=tmp_path / "events", database_url="")
    events_service = await build_events(settings)
    port = await events_service.start("127.0.0.1", 0)
    channel = open_channel(f"127.0.0.1:{port}")
    try:
        async with running_backends(tmp_path / "backends") as started:
            # The run, its log and the Run stream all use the events service restarted below.
            backends = dataclasses.replace(
                started, events=events_pb2_grpc.EventServiceStub(channel)
            )
            llm = OpenAIModel(holding_model.base_url, "k", "scripted-model", 60.0, 0)
            executor, _ = await backends.serve(backends.run_manager(llm))
            call = executor.Run(executor_pb2.StartRunRequest(query="hold", tenant_id=TENANT))
            received: list[common_pb2.Event] = []
            while not any(type_name(e.type) == "TOOL_OBSERVATION" for e in received):
                received.append(await _next(call))
            await until(lambda: holding_model.held == 1, "the run waits on its model")

            await events_service.stop(0)
            events_service = await build_events(settings)
            await events_service.start("127.0.0.1", port)
            holding_model.release()

            while type_name(received[-1].type) != "STREAM_END":
                received.append(await _next(call))
            assert await call.read() == grpc.aio.EOF
    finally:
        await channel.close()
        await events_service.stop(0)
    seqs = [event.seq for event in received]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    types = [type_name(event.type) for event in received]
    assert "WORKFLOW_COMPLETED" in types
    assert "ERROR_OCCURRED" not in types


async def _next(
    call: grpc.aio.UnaryStreamCall[executor_pb2.StartRunRequest, common_pb2.Event],
) -> common_pb2.Event:
    event = await call.read()
    assert event is not grpc.aio.EOF, "the Run stream ended before STREAM_END"
    assert isinstance(event, common_pb2.Event)
    return event
