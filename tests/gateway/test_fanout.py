"""The gateway's shared per-workflow feeds (gateway.fanout) against the real events service,
run as its own process so the calls it served can be counted on its side."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest
from prometheus_client import REGISTRY

from gateway.fanout import RECENT_BYTES, Chunk, FanOut
from gateway.routes.stream import typed_frame
from shuttle.envelope import type_name, type_value
from shuttle.events_client import EventsClient
from shuttle.events_client.follow import UpstreamError
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc
from tests.events.helpers import draft
from tests.support.events_process import EventsProcess

pytestmark = pytest.mark.integration

if TYPE_CHECKING:
    from shuttle.v1.events_pb2_grpc import EventServiceAsyncStub as Stub

TENANT = "acme"


@pytest.fixture
async def channel(events_process: EventsProcess) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(events_process.target) as opened:
        yield opened


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> Stub:
    """For the tests' own appends."""
    return events_pb2_grpc.EventServiceStub(channel)


def fanout_of(
    channel: grpc.aio.Channel, buffer_bytes: int = 1 << 20, seconds_per_watcher: float = 0.0001
) -> FanOut:
    return FanOut(
        EventsClient(channel),
        typed_frame,
        buffer_bytes=buffer_bytes,
        retry_seconds=30,
        seconds_per_watcher=seconds_per_watcher,
    )


async def create(stub: Stub, tenant: str = TENANT) -> str:
    created = await stub.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(), metadata=tenant_metadata(tenant)
    )
    return str(created.workflow_id)


async def append(stub: Stub, workflow_id: str, *drafts: common_pb2.EventDraft) -> None:
    await stub.Append(
        events_pb2.AppendRequest(workflow_id=workflow_id, events=drafts),
        metadata=tenant_metadata(TENANT),
        wait_for_ready=True,  # through a restart of the service
    )


def progress(count: int, size: int = 0) -> list[common_pb2.EventDraft]:
    return [draft("PROGRESS", {"n": n, "pad": "x" * size}) for n in range(count)]


class Reader:
    """Drains one watch in the background; `received` holds (seq, type) in arrival order."""

    def __init__(self, chunks: AsyncGenerator[Chunk, None]) -> None:
        self.chunks = chunks
        self.received: list[tuple[int, str]] = []
        self.frames = b""
        self.chunks_taken = 0
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for chunk in self.chunks:
            self.frames += chunk.frames
            self.chunks_taken += 1
            self.received += [(i.event.seq, type_name(i.event.type)) for i in chunk.items]

    @property
    def seqs(self) -> list[int]:
        return [seq for seq, _ in self.received]

    async def until(self, seq: int) -> None:
        while not self.received or self.received[-1][0] < seq:
            assert not self.task.done(), self.task
            await asyncio.sleep(0.01)


async def log_types(stub: Stub, workflow_id: str) -> list[tuple[int, str]]:
    page = await stub.List(
        events_pb2.ListRequest(workflow_id=workflow_id, from_seq=1, limit=1000),
        metadata=tenant_metadata(TENANT),
    )
    return [(e.seq, type_name(e.type)) for e in page.events]


def catchups() -> float:
    return REGISTRY.get_sample_value("shuttle_sse_catchups_total") or 0.0


async def test_watchers_from_different_points_get_exactly_the_log_over_one_upstream_call(
    channel: grpc.aio.Channel, stub: Stub, events_process: EventsProcess
) -> None:
    workflow_id = await create(stub)
    await append(stub, workflow_id, *progress(5))
    fanout = fanout_of(channel)
    calls_before = events_process.finished_streams()
    catchups_before = catchups()
    # The first watcher opens the feed at seq 4; eight more join at the same point.
    shared = [Reader(fanout.watch(TENANT, workflow_id, 4)) for _ in range(9)]
    await shared[0].until(5)
    assert fanout.feeds == 1
    # Later ones: live only, a type filter, and one from the very start (before the feed).
    live = Reader(fanout.watch(TENANT, workflow_id, 6))
    tools = Reader(fanout.watch(TENANT, workflow_id, 4, frozenset({type_value("TOOL_INVOKED")})))
    everything = Reader(fanout.watch(TENANT, workflow_id, 1))
    await everything.until(5)
    await append(stub, workflow_id, *progress(2), draft("TOOL_INVOKED"), *progress(3))
    await append(stub, workflow_id, draft("WORKFLOW_COMPLETED"))
    readers = [*shared, live, tools, everything]
    await asyncio.gather(*(r.task for r in readers))

    log = await log_types(stub, workflow_id)
    assert log[-1] == (13, "STREAM_END")
    assert everything.received == log
    assert all(r.received == log[3:] for r in shared)
    assert live.received == log[5:]
    assert tools.received == [(8, "TOOL_INVOKED"), (13, "STREAM_END")]
    # The bytes a watcher gets are the frames of exactly its events.
    assert everything.frames.count(b"\r\nevent: ") == len(log)
    assert b'"seq":13,' in shared[0].frames
    # One call for the feed and one for the watcher from seq 1 until it reached the feed.
    assert catchups() - catchups_before == 1
    assert events_process.wait_for_finished_streams(calls_before + 2) == calls_before + 2
    assert fanout.feeds == 0


async def test_the_upstream_call_ends_when_the_last_watcher_leaves(
    channel: grpc.aio.Channel, stub: Stub, events_process: EventsProcess
) -> None:
    workflow_id = await create(stub)
    fanout = fanout_of(channel)
    calls_before = events_process.finished_streams()
    readers = [Reader(fanout.watch(TENANT, workflow_id, 1)) for _ in range(20)]
    await append(stub, workflow_id, *progress(3))
    for reader in readers:
        await reader.until(3)
    for reader in readers[:-1]:
        reader.task.cancel()
        await asyncio.gather(reader.task, return_exceptions=True)
        await reader.chunks.aclose()
    assert fanout.feeds == 1
    assert events_process.finished_streams() == calls_before  # one watcher still follows
    readers[-1].task.cancel()
    await asyncio.gather(readers[-1].task, return_exceptions=True)
    await readers[-1].chunks.aclose()
    assert fanout.feeds == 0
    # The one call the twenty shared is over on the service's side too.
    assert events_process.wait_for_finished_streams(calls_before + 1) == calls_before + 1
    assert all(r.seqs == [1, 2, 3] for r in readers)


async def test_a_watcher_that_stops_reading_holds_nobody_back_and_the_buffer_stays_bounded(
    channel: grpc.aio.Channel,
    stub: Stub,
) -> None:
    workflow_id = await create(stub)
    limit = 16 * 1024
    fanout = fanout_of(channel, buffer_bytes=limit)
    stalled = fanout.watch(TENANT, workflow_id, 1)
    first = asyncio.create_task(anext(stalled))
    readers = [Reader(fanout.watch(TENANT, workflow_id, 1)) for _ in range(3)]
    await append(stub, workflow_id, *progress(1))
    assert [i.event.seq for i in (await first).items] == [1]
    catchups_before = catchups()
    # About 400 KiB of frames while the stalled watcher takes nothing.
    largest = 0
    for step in range(1, 41):
        await append(stub, workflow_id, *progress(10, size=1000))
        await readers[0].until(1 + 10 * step)
        largest = max(largest, fanout.buffered_bytes())
    await append(stub, workflow_id, draft("WORKFLOW_COMPLETED"))
    await asyncio.gather(*(r.task for r in readers))
    expected = list(range(1, 404))
    assert all(r.seqs == expected for r in readers)
    assert 0 < largest <= limit
    # The stalled watcher reads on: its own call from where it stopped, then the end.
    rest = [i.event.seq async for chunk in stalled for i in chunk.items]
    assert [1, *rest] == expected
    assert catchups() - catchups_before == 1


async def test_the_buffer_keeps_only_recent_frames_once_every_watcher_has_them(
    channel: grpc.aio.Channel,
    stub: Stub,
) -> None:
    workflow_id = await create(stub)
    fanout = fanout_of(channel, buffer_bytes=1 << 20)
    readers = [Reader(fanout.watch(TENANT, workflow_id, 1)) for _ in range(3)]
    largest = 0
    for step in range(1, 41):  # about 480 KiB of frames
        await append(stub, workflow_id, *progress(10, size=1000))
        for reader in readers:
            await reader.until(10 * step)
        largest = max(largest, fanout.buffered_bytes())
    # The recent frames, and at most the chunk that arrived since the watchers last read;
    # not the whole log, though the limit would hold it.
    assert 0 < largest <= RECENT_BYTES + 10 * 1200
    await append(stub, workflow_id, draft("WORKFLOW_COMPLETED"))
    await asyncio.gather(*(r.task for r in readers))
    assert all(r.seqs == list(range(1, 403)) for r in readers)


async def test_a_watcher_some_chunks_behind_takes_them_in_one_piece(
    channel: grpc.aio.Channel, stub: Stub
) -> None:
    workflow_id = await create(stub)
    fanout = fanout_of(channel)
    fast = Reader(fanout.watch(TENANT, workflow_id, 1))
    slow = fanout.watch(TENANT, workflow_id, 1)
    first = asyncio.create_task(anext(slow))
    await append(stub, workflow_id, *progress(1))
    assert [i.event.seq for i in (await first).items] == [1]
    for step in range(1, 4):
        await append(stub, workflow_id, *progress(2))
        await fast.until(1 + 2 * step)
    piece = await anext(slow)
    assert [i.event.seq for i in piece.items] == [2, 3, 4, 5, 6, 7]
    assert piece.frames == b"".join(typed_frame(i.event) for i in piece.items)
    await slow.aclose()
    fast.task.cancel()
    await asyncio.gather(fast.task, return_exceptions=True)
    await fast.chunks.aclose()


async def crowd_watching_a_busy_log(
    channel: grpc.aio.Channel, stub: Stub, seconds_per_watcher: float
) -> list[int]:
    """Twenty watchers at the head while 40 appends come one after another (each its own
    upstream batch); each must get the whole log. Returns the chunks each one took."""
    workflow_id = await create(stub)
    fanout = fanout_of(channel, seconds_per_watcher=seconds_per_watcher)
    readers = [Reader(fanout.watch(TENANT, workflow_id, 1)) for _ in range(20)]
    await append(stub, workflow_id, *progress(1))
    for reader in readers:
        await reader.until(1)
    for _ in range(40):
        await append(stub, workflow_id, *progress(1))
    await append(stub, workflow_id, draft("WORKFLOW_COMPLETED"))
    await asyncio.gather(*(r.task for r in readers))
    assert all(r.seqs == list(range(1, 44)) for r in readers)
    return [r.chunks_taken for r in readers]


async def test_a_crowd_of_watchers_takes_a_busy_log_in_few_writes(
    channel: grpc.aio.Channel, stub: Stub
) -> None:
    # 20 watchers at 5 ms each: one wake-up per 0.1 s while appends keep coming, and the
    # feed reads on meanwhile, so each round hands over everything that came.
    paced = await crowd_watching_a_busy_log(channel, stub, seconds_per_watcher=0.005)
    unpaced = await crowd_watching_a_busy_log(channel, stub, seconds_per_watcher=0.0)
    assert max(paced) < min(unpaced)
    assert max(paced) <= 10


async def test_tenants_never_share_a_feed(channel: grpc.aio.Channel, stub: Stub) -> None:
    workflow_id = await create(stub)
    fanout = fanout_of(channel)
    owner = Reader(fanout.watch(TENANT, workflow_id, 1))
    await append(stub, workflow_id, *progress(1))
    await owner.until(1)
    with pytest.raises(UpstreamError) as caught:
        async for _ in fanout.watch("globex", workflow_id, 1):
            pass
    assert caught.value.code == "not_found"
    await append(stub, workflow_id, draft("WORKFLOW_COMPLETED"))
    await owner.task
    assert owner.seqs == [1, 2, 3]


async def test_an_events_service_restart_loses_and_repeats_nothing(tmp_path: Path) -> None:
    process = EventsProcess(tmp_path).start()
    try:
        async with grpc.aio.insecure_channel(process.target) as channel:
            stub: Stub = events_pb2_grpc.EventServiceStub(channel)
            workflow_id = await create(stub)
            fanout = fanout_of(channel)
            readers = [Reader(fanout.watch(TENANT, workflow_id, 1)) for _ in range(5)]
            await append(stub, workflow_id, *progress(3))
            for reader in readers:
                await reader.until(3)
            await asyncio.to_thread(process.kill)
            await asyncio.to_thread(process.start)
            await append(stub, workflow_id, *progress(3), draft("WORKFLOW_COMPLETED"))
            await asyncio.gather(*(r.task for r in readers))
            assert all(r.seqs == list(range(1, 9)) for r in readers)
    finally:
        process.stop()
