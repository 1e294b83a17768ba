"""The runs of an executor process append over one EventService.AppendStream call."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from services.executor.append_stream import AppendStream
from services.executor.emitter import EventEmitter
from services.executor.grpc_clients import GrpcEventSink, GrpcWorkflowRegistry
from services.executor.ports import EventDraft
from services.executor.runs import RunManager, RunRequest
from shuttle.grpc_client import open_channel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.metrics import APPEND_STREAMS, GRPC_SECONDS
from shuttle.settings import Settings
from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.executor.conftest import TENANT, Backends, agent_defaults, read_log, types_of
from tests.executor.events_release import EventsRelease
from tests.executor.test_command_feed import gauge
from tests.support.holding_model import until
from tests.support.scripted_openai import ScriptedOpenAI, text

RUNS = 3
OLDER = frozenset({"AppendStream"})


def unary_appends() -> float:
    """Append calls the events service of this process has answered."""
    return sum(
        sample.value
        for metric in GRPC_SECONDS.collect()
        for sample in metric.samples
        if sample.name.endswith("_count")
        and sample.labels["method"] == "/shuttle.v1.EventService/Append"
    )


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
    await runs.shutdown(1)


async def test_against_an_events_service_without_it_runs_append_call_by_call(
    tmp_path: Path,
    backends: Backends,
    model: ScriptedOpenAI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    older = EventsRelease(Settings(data_dir=tmp_path, database_url=""), omit=OLDER)
    port = await older.start()
    channel = open_channel(f"127.0.0.1:{port}")
    events = events_pb2_grpc.EventServiceStub(channel)
    appends = AppendStream(events)
    model.script(*[text("Nothing to compute.") for _ in range(2 * RUNS)])
    runs = RunManager(
        registry=GrpcWorkflowRegistry(events),
        sinks=lambda wf, tenant: GrpcEventSink(events, wf, tenant, appends),
        tools=backends.tools,
        llm=OpenAIModel(model.base_url, "test-key", "scripted-model", 10.0, 0),
        settings=agent_defaults(),
    )
    try:
        with caplog.at_level(logging.WARNING, logger="services.executor.append_stream"):
            started = [
                await runs.start(RunRequest(query="Say hello", tenant_id=TENANT))
                for _ in range(RUNS)
            ]
            for workflow_id in started:
                events_seen = await read_log(events, workflow_id)
                assert types_of(events_seen)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
                assert [e["seq"] for e in events_seen] == list(range(1, len(events_seen) + 1))
        # Asked once; every batch then went by Append, and the run never noticed.
        assert older.calls["AppendStream"] == 1
        assert older.calls["Append"] >= RUNS * 2
        warnings = [r.message for r in caplog.records if "AppendStream" in r.message]
        assert warnings == ["the events service has no AppendStream; appending call by call"]
    finally:
        await runs.shutdown(1)
        await appends.close()
        await channel.close()
        await older.stop()


async def test_after_an_outage_an_upgraded_events_service_gets_the_batches_over_the_stream(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(data_dir=tmp_path, database_url="")
    older = EventsRelease(settings, omit=OLDER)
    port = await older.start()
    upgraded = EventsRelease(settings)
    channel = open_channel(f"127.0.0.1:{port}")
    events = events_pb2_grpc.EventServiceStub(channel)
    appends = AppendStream(events)
    try:
        created = await events.CreateWorkflow(
            events_pb2.CreateWorkflowRequest(tenant_id=TENANT, query="q")
        )
        emitter = EventEmitter(GrpcEventSink(events, created.workflow_id, TENANT, appends))
        await emitter.emit(EventDraft("PROGRESS", "before"))
        await emitter.flush()
        assert (older.calls["AppendStream"], older.calls["Append"]) == (1, 1)

        await older.stop()
        with caplog.at_level(logging.WARNING, logger="services.executor.emitter"):
            await emitter.emit(EventDraft("PROGRESS", "during the upgrade"))
            await until(
                lambda: any("resending" in r.message for r in caplog.records),
                "the batch meets the outage",
            )
        await upgraded.start(port)
        await emitter.flush()
        assert upgraded.calls["Append"] == 0 and upgraded.calls["AppendStream"] == 2  # ask, call
        await emitter.emit(EventDraft("STREAM_END", "end"))
        await emitter.flush()
        logged = await read_log(events, created.workflow_id)
        assert [(e["seq"], e["message"]) for e in logged] == [
            (1, "before"),
            (2, "during the upgrade"),
            (3, "end"),
        ]
    finally:
        await appends.close()
        await channel.close()
        await upgraded.stop()
