"""EventService.FollowCommands: many workflows' commands over one call, each watch ending
on its own (STREAM_END or an error) while the others go on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc

from services.events.wire import MAX_BATCH_MESSAGE_BYTES
from shuttle.envelope import type_name
from shuttle.grpc_client import tenant_metadata
from shuttle.metrics import COMMAND_WATCHES
from shuttle.v1 import events_pb2

from .helpers import draft
from .test_grpc_api import FINISH, append, create

if TYPE_CHECKING:
    from shuttle.v1.events_pb2_grpc import EventServiceAsyncStub as Stub

FeedCall = grpc.aio.StreamStreamCall[events_pb2.CommandWatch, events_pb2.CommandFeed]


class Watcher:
    """One FollowCommands call, with the watches the test sends over it."""

    def __init__(self, stub: Stub, tenant: str = "") -> None:
        self._requests: asyncio.Queue[events_pb2.CommandWatch | None] = asyncio.Queue()
        metadata = tenant_metadata(tenant) if tenant else None
        self.call: FeedCall = stub.FollowCommands(self._drain(), metadata=metadata)

    async def _drain(self) -> AsyncIterator[events_pb2.CommandWatch]:
        while (request := await self._requests.get()) is not None:
            yield request

    def watch(self, workflow_id: str, tenant: str = "t1", from_seq: int = 1) -> None:
        watch = events_pb2.WatchCommands(
            workflow_id=workflow_id, tenant_id=tenant, from_seq=from_seq
        )
        self._requests.put_nowait(events_pb2.CommandWatch(watch=watch))

    def unwatch(self, workflow_id: str) -> None:
        unwatch = events_pb2.UnwatchCommands(workflow_id=workflow_id)
        self._requests.put_nowait(events_pb2.CommandWatch(unwatch=unwatch))

    def done_writing(self) -> None:
        self._requests.put_nowait(None)

    async def next(self) -> events_pb2.CommandFeed:
        async with asyncio.timeout(30):
            item = await self.call.read()
        assert isinstance(item, events_pb2.CommandFeed), "the feed ended early"
        return item


def watches() -> float:
    return float(next(iter(COMMAND_WATCHES.collect())).samples[0].value)


def commands(item: events_pb2.CommandFeed) -> list[tuple[int, str]]:
    return [(e.seq, type_name(e.type)) for e in item.events]


async def test_watches_bring_only_commands_and_end_at_stream_end(stub: Stub) -> None:
    await create(stub, "wf-1")
    await create(stub, "wf-2")
    await append(stub, draft("PROGRESS"), draft("WORKFLOW_PAUSING", {"reason": "r"}))
    feed = Watcher(stub)
    feed.watch("wf-1")
    replayed = await feed.next()
    assert (replayed.workflow_id, commands(replayed)) == ("wf-1", [(2, "WORKFLOW_PAUSING")])

    feed.watch("wf-2")
    await append(
        stub, draft("MESSAGE_RECEIVED", {"from": "user", "content": "hi"}), workflow_id="wf-2"
    )
    live = await feed.next()
    assert (live.workflow_id, commands(live)) == ("wf-2", [(1, "MESSAGE_RECEIVED")])

    await append(stub, draft("WORKFLOW_RESUMED"), *FINISH)
    ended = await feed.next()
    assert (ended.workflow_id, commands(ended), ended.ended) == (
        "wf-1",
        [(3, "WORKFLOW_RESUMED")],
        True,
    )
    # Half-closed: the call ends once the last watch has.
    feed.unwatch("wf-2")
    feed.done_writing()
    assert await feed.call.read() == grpc.aio.EOF
    assert await feed.call.code() == grpc.StatusCode.OK


async def test_a_bad_watch_fails_alone_and_the_call_goes_on(stub: Stub) -> None:
    await create(stub, "wf-1")
    before = watches()
    feed = Watcher(stub, tenant="t1")
    feed.watch("wf-unknown")
    feed.watch("wf-1", tenant="t2")  # differs from the call's tenant metadata
    failures = {
        (item.workflow_id, item.error.code) for item in [await feed.next(), await feed.next()]
    }
    assert failures == {
        ("wf-unknown", grpc.StatusCode.NOT_FOUND.value[0]),
        ("wf-1", grpc.StatusCode.INVALID_ARGUMENT.value[0]),
    }

    feed.watch("wf-1")
    await append(stub, draft("WORKFLOW_CANCELLING", {"reason": "stop"}))
    item = await feed.next()
    assert (item.workflow_id, commands(item), item.HasField("error")) == (
        "wf-1",
        [(1, "WORKFLOW_CANCELLING")],
        False,
    )
    assert watches() == before + 1
    feed.call.cancel()
    # A cancelled call stops its watches.
    deadline = time.monotonic() + 30
    while watches() != before:
        assert time.monotonic() < deadline, "the watches of a cancelled call go on"
        await asyncio.sleep(0.01)


async def test_another_tenants_workflow_is_not_found(stub: Stub) -> None:
    await create(stub, "wf-1")
    feed = Watcher(stub)
    feed.watch("wf-1", tenant="t2")
    item = await feed.next()
    assert (item.workflow_id, item.error.code) == ("wf-1", grpc.StatusCode.NOT_FOUND.value[0])
    feed.call.cancel()


async def test_large_commands_are_split_across_messages_with_the_end_on_the_last(
    stub: Stub,
) -> None:
    await create(stub)
    big = "x" * (MAX_BATCH_MESSAGE_BYTES // 2)
    messages = [draft("MESSAGE_RECEIVED", {"from": "user", "content": big}) for _ in range(5)]
    await append(stub, *messages, *FINISH)
    feed = Watcher(stub)
    feed.watch("wf-1")
    got = [await feed.next()]
    while not got[-1].ended:
        got.append(await feed.next())
    assert len(got) >= 3  # at most two such events fit one message
    assert [seq for item in got for seq, _ in commands(item)] == [1, 2, 3, 4, 5]
    feed.call.cancel()
