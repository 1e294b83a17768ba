"""A server that ends its connections after a second (max connection age): the process's
long-lived calls (a followed log, the shared AppendStream, the command feed) break on each
GOAWAY and are opened again, with nothing lost or repeated."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from services.events.__main__ import build as build_events
from services.executor.commands.feed import CommandFeed, RunReceiver
from shuttle.envelope import type_name
from shuttle.events_client import EventsClient
from shuttle.grpc_client import open_channel
from shuttle.grpc_server import ConnectionAge
from shuttle.metrics import GRPC_SECONDS
from shuttle.settings import Settings
from shuttle.v1 import common_pb2
from shuttle.workflow_log import EventDraft, LogCommand
from tests.support.holding_model import until

TENANT = "t1"
STREAM_BATCHES = "/shuttle.v1.EventService/StreamBatches"
MESSAGES = 60


def finished_streams() -> float:
    """StreamBatches calls this process's servers have finished."""
    return sum(
        sample.value
        for metric in GRPC_SECONDS.collect()
        for sample in metric.samples
        if sample.name.endswith("_count") and sample.labels.get("method") == STREAM_BATCHES
    )


class CountingReceiver(RunReceiver):
    """Counts what the feed hands over, before the receiver drops repeats by seq."""

    def __init__(self) -> None:
        super().__init__()
        self.seqs: list[int] = []

    def deliver(self, command: LogCommand) -> None:
        self.seqs.append(command.seq)
        super().deliver(command)


def user_message(n: int) -> EventDraft:
    return EventDraft("MESSAGE_RECEIVED", "m", {"from": "user", "content": str(n)})


async def test_streams_outlive_the_servers_connections(tmp_path: Path) -> None:
    service = await build_events(Settings(data_dir=tmp_path, database_url=""))
    service.connection_age = ConnectionAge(seconds=1.0, grace_seconds=0.5)
    port = await service.start("127.0.0.1", 0)
    channel = open_channel(f"127.0.0.1:{port}")
    client = EventsClient(channel)
    feed = CommandFeed(client)
    try:
        workflow_id = await client.create_workflow(TENANT, query="q")
        receiver = CountingReceiver()
        feed.register(workflow_id, TENANT, receiver)

        async def read_log() -> list[common_pb2.Event]:
            return [e async for batch in client.follow(workflow_id, TENANT) for e in batch]

        following = asyncio.create_task(read_log())
        streams_before = finished_streams()
        producer = client.producer(workflow_id, TENANT, name="writer", shared_stream=True)
        for n in range(MESSAGES):  # about four seconds: several connections end meanwhile
            await producer.append([user_message(n)])
            await asyncio.sleep(0.06)
        await producer.append([EventDraft("WORKFLOW_COMPLETED", "done")])
        events = await asyncio.wait_for(following, 30)
        await until(lambda: len(set(receiver.seqs)) == MESSAGES, "every command arrives")
    finally:
        await feed.close()
        await client.close()
        await channel.close()
        await service.stop(0)

    # The followed log was opened again after its connection ended...
    assert finished_streams() - streams_before >= 2
    # ...and reads as one sequence: every batch stored once, no seq missed or repeated.
    assert [e.seq for e in events] == list(range(1, MESSAGES + 3))
    contents = [json.loads(e.payload_json)["content"] for e in events[:MESSAGES]]
    assert contents == [str(n) for n in range(MESSAGES)]
    assert [type_name(e.type) for e in events[-2:]] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    # The command feed delivered each command in order, once.
    assert receiver.interrupts.received == [str(n) for n in range(MESSAGES)]
    assert receiver.seqs == sorted(set(receiver.seqs))
