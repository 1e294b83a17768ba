"""The executor's one command feed: every run's commands over one FollowCommands stream,
watched again after an events service restart without losing or repeating a command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.events.__main__ import build as build_events
from services.executor.adapters.events import GrpcWorkflowLog
from services.executor.commands.feed import CommandFeed, RunReceiver
from services.executor.ports import RunRequest
from shuttle.events_client import EventsClient
from shuttle.grpc_client import open_channel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.metrics import COMMAND_FEEDS, COMMAND_WATCHES, GRPC_SECONDS
from shuttle.settings import Settings
from shuttle.v1 import events_pb2, events_pb2_grpc
from shuttle.workflow_log import LogCommand
from tests.executor.conftest import TENANT, Backends, first, types_of
from tests.support.holding_model import HoldingModel, until
from tests.support.scripted_openai import ScriptedOpenAI, text

FOLLOW_COMMANDS = "/shuttle.v1.EventService/FollowCommands"


def gauge(metric: Any) -> float:
    return float(metric.collect()[0].samples[0].value)


def calls_ended(method: str) -> float:
    """Calls of `method` the gRPC servers of this process have ended, whatever their code."""
    return sum(
        sample.value
        for metric in GRPC_SECONDS.collect()
        for sample in metric.samples
        if sample.name.endswith("_count") and sample.labels["method"] == method
    )


async def test_runs_share_one_stream_and_a_command_from_another_replica_reaches_its_run(
    backends: Backends, holding_model: HoldingModel
) -> None:
    feeds, watches = gauge(COMMAND_FEEDS), gauge(COMMAND_WATCHES)
    llm = OpenAIModel(holding_model.base_url, "test-key", "scripted-model", 10.0, 0)
    runs = backends.run_manager(
        llm, completion_check=False, reflection_interval=0, feed_idle_seconds=0.2
    )
    held = [await runs.start(RunRequest(query="hold", tenant_id=TENANT)) for _ in range(4)]
    target = await runs.start(RunRequest(query="until interrupted", tenant_id=TENANT))
    await until(lambda: holding_model.held == len(held), "every held run waits on the model")
    await until(lambda: gauge(COMMAND_WATCHES) == watches + 5, "every run is watched")
    assert gauge(COMMAND_FEEDS) == feeds + 1

    # What ExecutorService.Interrupt on another replica appends.
    await GrpcWorkflowLog(backends.client).append(
        target, TENANT, "MESSAGE_RECEIVED", "Message from user", {"from": "user", "content": "Stop"}
    )
    events = await backends.read_log(target)
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert first(events, "MESSAGE_RECEIVED")["payload"]["content"] == "Stop"
    assert holding_model.saw_interrupt == 1

    holding_model.release()
    for workflow_id in held:
        assert types_of(await backends.read_log(workflow_id))[-1] == "STREAM_END"
    # Nothing left to follow: the stream is closed once it has been idle a while.
    await until(lambda: gauge(COMMAND_FEEDS) == feeds, "the idle feed closes")
    assert gauge(COMMAND_WATCHES) == watches
    await runs.shutdown()


async def test_runs_one_after_another_keep_the_feed_open(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(*[text("Nothing to compute.") for _ in range(4)])
    feeds, ended = gauge(COMMAND_FEEDS), calls_ended(FOLLOW_COMMANDS)
    llm = OpenAIModel(model.base_url, "test-key", "scripted-model", 10.0, 0)
    runs = backends.run_manager(llm, completion_check=False, reflection_interval=0)
    for _ in range(2):
        workflow_id = await runs.start(RunRequest(query="Say hello", tenant_id=TENANT))
        assert types_of(await backends.read_log(workflow_id))[-1] == "STREAM_END"
        await until(lambda: runs.active_runs == 0, "the run is over")
        # Nothing is watched now, yet the feed waits for the next run.
        assert gauge(COMMAND_FEEDS) == feeds + 1
    assert calls_ended(FOLLOW_COMMANDS) == ended
    await runs.shutdown()
    await until(lambda: gauge(COMMAND_FEEDS) == feeds, "the feed closes with the runs")


class CountingReceiver(RunReceiver):
    """Counts what the feed hands over, before the receiver drops repeats by seq."""

    def __init__(self) -> None:
        super().__init__()
        self.seqs: list[int] = []

    def deliver(self, command: LogCommand) -> None:
        self.seqs.append(command.seq)
        super().deliver(command)


async def test_a_command_after_an_events_restart_arrives_exactly_once(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, database_url="")
    events_service = await build_events(settings)
    port = await events_service.start("127.0.0.1", 0)
    channel = open_channel(f"127.0.0.1:{port}")
    stub = events_pb2_grpc.EventServiceStub(channel)
    client = EventsClient(channel)
    workflow_log = GrpcWorkflowLog(client)
    feed = CommandFeed(client)
    try:
        ids = []
        for _ in range(2):
            created = await stub.CreateWorkflow(
                events_pb2.CreateWorkflowRequest(tenant_id=TENANT, query="q")
            )
            ids.append(created.workflow_id)
        receivers = [CountingReceiver() for _ in ids]
        for workflow_id, receiver in zip(ids, receivers, strict=True):
            feed.register(workflow_id, TENANT, receiver)
        before = await workflow_log.append(
            ids[0], TENANT, "MESSAGE_RECEIVED", "m", {"from": "user", "content": "before"}
        )
        await until(lambda: receivers[0].seqs == [before], "the first command arrives")

        await events_service.stop(0)
        events_service = await build_events(settings)
        await events_service.start("127.0.0.1", port)
        await stub.GetWorkflow(
            events_pb2.GetWorkflowRequest(workflow_id=ids[0], tenant_id=TENANT),
            wait_for_ready=True,
        )
        after = await workflow_log.append(
            ids[0], TENANT, "MESSAGE_RECEIVED", "m", {"from": "user", "content": "after"}
        )
        cancel = await workflow_log.append(
            ids[1], TENANT, "WORKFLOW_CANCELLING", "c", {"reason": "after the restart"}
        )
        await until(lambda: receivers[0].seqs[-1:] == [after], "the later command arrives")
        await until(lambda: receivers[1].seqs == [cancel], "the other run's command arrives")
        assert receivers[0].seqs == [before, after]
        assert receivers[0].interrupts.received == ["before", "after"]
        assert receivers[1].control.cancel_requested
    finally:
        await feed.close()
        await channel.close()
        await events_service.stop(0)
