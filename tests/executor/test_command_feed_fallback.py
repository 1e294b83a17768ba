"""The command feed against an events service without FollowCommands (an older release
during a rolling upgrade): one Stream per run instead, and FollowCommands again once the
events service has it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.executor.follower import CommandFeed
from services.executor.grpc_log import GrpcCommandSource, GrpcWorkflowLog
from shuttle.envelope import type_value
from shuttle.grpc_client import open_channel
from shuttle.metrics import COMMAND_FEEDS
from shuttle.settings import Settings
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc
from tests.executor.conftest import TENANT
from tests.executor.events_release import EventsRelease
from tests.executor.test_command_feed import CountingReceiver, gauge
from tests.support.holding_model import until

OLDER = frozenset({"FollowCommands"})


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, database_url="")


@pytest.fixture
async def older(settings: Settings) -> AsyncIterator[EventsRelease]:
    release = EventsRelease(settings, omit=OLDER)
    await release.start()
    yield release
    await release.stop()


class Client:
    """The executor's side: a command feed, and what other replicas append."""

    def __init__(self, port: int) -> None:
        self.channel = open_channel(f"127.0.0.1:{port}")
        self.stub = events_pb2_grpc.EventServiceStub(self.channel)
        self.feed = CommandFeed(GrpcCommandSource(self.stub))
        self.log = GrpcWorkflowLog(self.stub)

    async def create(self) -> str:
        created = await self.stub.CreateWorkflow(
            events_pb2.CreateWorkflowRequest(tenant_id=TENANT, query="q")
        )
        return str(created.workflow_id)

    async def finish(self, workflow_id: str) -> None:
        await self.stub.Append(
            events_pb2.AppendRequest(
                workflow_id=workflow_id,
                tenant_id=TENANT,
                events=[
                    common_pb2.EventDraft(type=type_value("WORKFLOW_COMPLETED")),
                    common_pb2.EventDraft(type=type_value("STREAM_END")),
                ],
            )
        )

    async def close(self) -> None:
        await self.feed.close()
        await self.channel.close()


@pytest.fixture
async def client(older: EventsRelease) -> AsyncIterator[Client]:
    made = Client(older.port)
    yield made
    await made.close()


def fallback_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "FollowCommands" in r.getMessage()
    ]


async def test_each_command_reaches_its_run_once_over_a_stream_per_run(
    older: EventsRelease, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    ids = [await client.create() for _ in range(3)]
    receivers = [CountingReceiver() for _ in ids]
    for workflow_id, receiver in zip(ids, receivers, strict=True):
        client.feed.register(workflow_id, TENANT, receiver)
    await until(lambda: older.open["Stream"] == 3, "each run's log is streamed")

    pause = await client.log.append(ids[0], TENANT, "WORKFLOW_PAUSING", "p", {"reason": "r"})
    cancel = await client.log.append(ids[1], TENANT, "WORKFLOW_CANCELLING", "c", {"reason": "r"})
    message = await client.log.append(
        ids[2], TENANT, "MESSAGE_RECEIVED", "m", {"from": "user", "content": "Stop"}
    )
    for workflow_id in ids:
        await client.finish(workflow_id)
    # Each watch ends at its STREAM_END, after everything before it was handed over.
    await until(lambda: client.feed.watched == 0, "every watch ends at STREAM_END")
    assert [r.seqs for r in receivers] == [[pause], [cancel], [message]]
    assert receivers[0].control.pause_requested
    assert receivers[1].control.cancel_requested
    assert receivers[2].interrupts.received == ["Stop"]
    await until(lambda: older.open["Stream"] == 0, "the streams end")
    assert older.calls["FollowCommands"] == 1
    assert len(fallback_warnings(caplog)) == 1

    # The answer is kept: a later session, with another run, goes straight to its stream.
    later = await client.create()
    receiver = CountingReceiver()
    client.feed.register(later, TENANT, receiver)
    interrupt = await client.log.append(
        later, TENANT, "MESSAGE_RECEIVED", "m", {"from": "user", "content": "later"}
    )
    await until(lambda: receiver.seqs == [interrupt], "the later run's command arrives")
    assert (older.calls["FollowCommands"], older.calls["Stream"]) == (1, 4)
    assert len(fallback_warnings(caplog)) == 1

    # An unwatched run's stream is cancelled.
    client.feed.unregister(later)
    await until(lambda: older.open["Stream"] == 0, "the unwatched run's stream is cancelled")


async def test_an_upgraded_events_service_is_followed_with_follow_commands_again(
    settings: Settings, older: EventsRelease, client: Client
) -> None:
    feeds = gauge(COMMAND_FEEDS)
    workflow_id = await client.create()
    receiver = CountingReceiver()
    client.feed.register(workflow_id, TENANT, receiver)
    before = await client.log.append(
        workflow_id, TENANT, "MESSAGE_RECEIVED", "m", {"from": "user", "content": "before"}
    )
    await until(lambda: receiver.seqs == [before], "the command arrives over its stream")

    await older.stop()
    upgraded = EventsRelease(settings)
    await upgraded.start(older.port)
    try:
        await until(lambda: gauge(COMMAND_FEEDS) == feeds + 1, "FollowCommands is used again")
        after = await client.log.append(
            workflow_id, TENANT, "MESSAGE_RECEIVED", "m", {"from": "user", "content": "after"}
        )
        await until(lambda: receiver.seqs[-1:] == [after], "the later command arrives")
        assert receiver.seqs == [before, after]
        assert receiver.interrupts.received == ["before", "after"]
    finally:
        await client.feed.close()
        await upgraded.stop()


async def test_after_a_broken_session_the_events_service_is_asked_again(
    settings: Settings,
) -> None:
    """An events service replaced by an older release (a rollback) breaks the
    FollowCommands call; the session opened after it asks again and takes streams."""
    full = EventsRelease(settings)
    client = Client(await full.start())
    older = EventsRelease(settings, omit=OLDER)
    try:
        workflow_id = await client.create()
        receiver = CountingReceiver()
        client.feed.register(workflow_id, TENANT, receiver)
        await until(lambda: full.open["FollowCommands"] == 1, "FollowCommands is used")

        await full.stop()
        await older.start(full.port)
        await until(lambda: older.open["Stream"] == 1, "the run's log is streamed")
        cancel = await client.log.append(workflow_id, TENANT, "WORKFLOW_CANCELLING", "c", {})
        await until(lambda: receiver.seqs == [cancel], "the command arrives")
        assert receiver.control.cancel_requested
    finally:
        await client.close()
        await older.stop()
        await full.stop()


async def test_a_full_events_service_is_followed_with_one_follow_commands_call(
    settings: Settings,
) -> None:
    full = EventsRelease(settings)
    client = Client(await full.start())
    try:
        feeds = gauge(COMMAND_FEEDS)
        ids = [await client.create() for _ in range(2)]
        receivers = [CountingReceiver() for _ in ids]
        for workflow_id, receiver in zip(ids, receivers, strict=True):
            client.feed.register(workflow_id, TENANT, receiver)
        cancel = await client.log.append(ids[1], TENANT, "WORKFLOW_CANCELLING", "c", {})
        await until(lambda: receivers[1].seqs == [cancel], "the command arrives")
        assert gauge(COMMAND_FEEDS) == feeds + 1
        assert (full.open["FollowCommands"], full.calls["Stream"]) == (1, 0)
    finally:
        await client.close()
        await full.stop()


async def test_an_unknown_workflow_ends_its_watch_alone(
    older: EventsRelease, client: Client
) -> None:
    known = await client.create()
    receiver = CountingReceiver()
    client.feed.register("wf-unknown", TENANT, CountingReceiver())
    client.feed.register(known, TENANT, receiver)
    await until(lambda: client.feed.watched == 1, "the unknown workflow's watch ends")
    resume = await client.log.append(known, TENANT, "WORKFLOW_RESUMED", "r", {})
    await until(lambda: receiver.seqs == [resume], "the other run's command arrives")
    assert older.calls["Stream"] == 2
