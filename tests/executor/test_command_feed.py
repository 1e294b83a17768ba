"""The executor's one command feed: every run's commands over one FollowCommands stream,
watched again after an events service restart without losing or repeating a command."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response

from services.events.__main__ import build as build_events
from services.executor.follower import CommandFeed, LogCommand, RunReceiver
from services.executor.grpc_log import GrpcCommandSource, GrpcWorkflowLog
from services.executor.runs import RunRequest
from shuttle.grpc_client import open_channel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.metrics import COMMAND_FEEDS, COMMAND_WATCHES
from shuttle.settings import Settings
from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.executor.conftest import TENANT, Backends, first, types_of
from tests.support.scripted_openai import Reply, ScriptedOpenAI, text

WAIT_SECONDS = 60


def gauge(metric: Any) -> float:
    return float(metric.collect()[0].samples[0].value)


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        await asyncio.sleep(0.01)


def interrupted(body: dict[str, Any]) -> bool:
    return any("[USER INTERRUPT]" in str(m.get("content") or "") for m in body["messages"])


def asked(body: dict[str, Any], query: str) -> bool:
    return any(m.get("role") == "user" and m.get("content") == query for m in body["messages"])


class HoldingModel(ScriptedOpenAI):
    """Runs asked "hold" call the calculator once and hold their next call until released;
    the run asked "until interrupted" calls it until it sees the user's interrupt."""

    def __init__(self) -> None:
        super().__init__(handler=self.reply)
        self.held = 0
        self.saw_interrupt = 0
        self._release: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def reply(self, body: dict[str, Any]) -> Reply:
        if body.get("stream"):
            return text("Done.")
        if interrupted(body):
            self.saw_interrupt += 1
            return text("Noted.")
        rounds = sum(m.get("role") == "tool" for m in body["messages"])
        if asked(body, "hold") and rounds:
            return text("Two.")
        return Reply(tool_calls=[(f"call-{rounds}", "calculator", {"expression": "1+1"})])

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        rounds = sum(m.get("role") == "tool" for m in body.get("messages", []))
        if asked(body, "hold") and rounds and not body.get("stream"):
            if self._release is None:
                self._loop, self._release = asyncio.get_running_loop(), asyncio.Event()
            self.held += 1
            await self._release.wait()
        return await super()._completions(request)

    def release(self) -> None:
        if self._loop is not None and self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)


@pytest.fixture
def model() -> Iterator[HoldingModel]:
    server = HoldingModel()
    server.start()
    yield server
    server.release()
    server.stop()


async def test_runs_share_one_stream_and_a_command_from_another_replica_reaches_its_run(
    backends: Backends, model: HoldingModel
) -> None:
    feeds, watches = gauge(COMMAND_FEEDS), gauge(COMMAND_WATCHES)
    llm = OpenAIModel(model.base_url, "test-key", "scripted-model", 10.0, 0)
    runs = backends.run_manager(llm, completion_check=False, reflection_interval=0)
    held = [await runs.start(RunRequest(query="hold", tenant_id=TENANT)) for _ in range(4)]
    target = await runs.start(RunRequest(query="until interrupted", tenant_id=TENANT))
    await until(lambda: model.held == len(held), "every held run waits on the model")
    await until(lambda: gauge(COMMAND_WATCHES) == watches + 5, "every run is watched")
    assert gauge(COMMAND_FEEDS) == feeds + 1

    # What ExecutorService.Interrupt on another replica appends.
    await GrpcWorkflowLog(backends.events).append(
        target, TENANT, "MESSAGE_RECEIVED", "Message from user", {"from": "user", "content": "Stop"}
    )
    events = await backends.read_log(target)
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert first(events, "MESSAGE_RECEIVED")["payload"]["content"] == "Stop"
    assert model.saw_interrupt == 1

    model.release()
    for workflow_id in held:
        assert types_of(await backends.read_log(workflow_id))[-1] == "STREAM_END"
    # Nothing left to follow: the stream is closed.
    await until(lambda: gauge(COMMAND_FEEDS) == feeds, "the idle feed closes")
    assert gauge(COMMAND_WATCHES) == watches
    await runs.shutdown(1)


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
    workflow_log = GrpcWorkflowLog(stub)
    feed = CommandFeed(GrpcCommandSource(stub))
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
