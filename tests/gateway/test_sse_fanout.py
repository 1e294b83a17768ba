"""SSE clients of one workflow through the real gateway (uvicorn, in this process) and the
real events service (its own process): one upstream call for all of them, each client's own
resume point, a client that stops reading, and an events service restart."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import REGISTRY

from gateway.fanout import FanOut
from shuttle.grpc_client import tenant_metadata
from shuttle.settings import Settings
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc
from tests.events.helpers import draft
from tests.support.events_process import EventsProcess
from tests.support.gateway_server import GatewayServer
from tests.support.sse import Frame, parse_frames, read_stream

pytestmark = pytest.mark.integration

TENANT = tenant_metadata("default")  # every caller's tenant while auth is off
BUFFER_BYTES = 64 * 1024


@pytest.fixture
def gateway(events_process: EventsProcess, tmp_path: Path) -> Iterator[GatewayServer]:
    settings = Settings(
        events_port=events_process.port,
        data_dir=tmp_path,
        database_url="",
        auth="off",
        rate_limit="100000/minute",
        sse_feed_buffer_bytes=BUFFER_BYTES,
    )
    server = GatewayServer(settings).start()
    yield server
    server.stop()


@pytest.fixture
def events(events_process: EventsProcess) -> Iterator[events_pb2_grpc.EventServiceStub]:
    with grpc.insecure_channel(events_process.target) as channel:
        yield events_pb2_grpc.EventServiceStub(channel)


def create(events: events_pb2_grpc.EventServiceStub) -> str:
    created = events.CreateWorkflow(events_pb2.CreateWorkflowRequest(), metadata=TENANT)
    return str(created.workflow_id)


def append(
    events: events_pb2_grpc.EventServiceStub, workflow_id: str, *drafts: common_pb2.EventDraft
) -> None:
    events.Append(
        events_pb2.AppendRequest(workflow_id=workflow_id, events=drafts),
        metadata=TENANT,
        wait_for_ready=True,  # through a restart of the service
    )


def progress(count: int, size: int = 0) -> list[common_pb2.EventDraft]:
    return [draft("PROGRESS", {"n": n, "pad": "x" * size}) for n in range(count)]


def fanout_of(gateway: GatewayServer) -> FanOut:
    fanout: FanOut = gateway.app.state.fanout
    return fanout


def wait_until(condition: Callable[[], bool], what: str, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def catchups() -> float:
    return REGISTRY.get_sample_value("shuttle_sse_catchups_total") or 0.0


def ids(frames: list[Frame]) -> list[int]:
    return [int(frame.id) for frame in frames if frame.id is not None]


class RawClient:
    """One SSE client on a plain socket with a small receive buffer, reading only when told."""

    def __init__(self, gateway: GatewayServer, path: str) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", gateway.port))
        self.sock.sendall(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
        self.received = b""

    def read_until(self, marker: bytes) -> None:
        while marker not in self.received:
            data = self.sock.recv(65536)
            assert data, "the gateway closed the stream"
            self.received += data

    def read_to_end(self) -> list[Frame]:
        while data := self.sock.recv(65536):
            self.received += data
        self.sock.close()
        body = self.received.split(b"\r\n\r\n", 1)[1].decode()
        return parse_frames([line.rstrip("\r") for line in body.split("\n")])[0]


def test_clients_from_different_resume_points_get_exactly_the_log_over_one_upstream_call(
    gateway: GatewayServer,
    events: events_pb2_grpc.EventServiceStub,
    events_process: EventsProcess,
) -> None:
    workflow_id = create(events)
    append(events, workflow_id, *progress(5))
    fanout = fanout_of(gateway)
    calls_before, catchups_before = events_process.finished_streams(), catchups()
    path = f"/api/v1/stream/sse?workflow_id={workflow_id}"
    with ThreadPoolExecutor(max_workers=12) as pool:

        def client(url: str, headers: dict[str, str] | None = None) -> Future[Any]:
            return pool.submit(read_stream, gateway.url, url, headers)

        # The first client opens the feed at seq 4; seven more join it there.
        first = [client(path, {"Last-Event-ID": "3"})]
        wait_until(lambda: fanout.feeds == 1, "the feed")
        same = [client(path, {"Last-Event-ID": "3-0"}) for _ in range(7)]
        live = client(f"{path}&last_event_id=5")
        tools = client(f"{path}&types=TOOL_INVOKED", {"Last-Event-ID": "3"})
        # From before the feed's position: these catch up on their own first.
        everything = client(path)
        older = client(f"{path}&last_event_id=1-0")
        wait_until(lambda: fanout.watchers == 12, "every client to join")
        append(events, workflow_id, *progress(2), draft("TOOL_INVOKED"), *progress(3))
        append(events, workflow_id, draft("WORKFLOW_COMPLETED"))
        streams = {
            name: [f.result() for f in futures]
            for name, futures in {
                "from 4": first + same,
                "live": [live],
                "tools": [tools],
                "everything": [everything],
                "older": [older],
            }.items()
        }

    assert all(status == 200 for group in streams.values() for status, _ in group)
    assert all(ids(frames) == list(range(4, 14)) for _, frames in streams["from 4"])
    assert ids(streams["live"][0][1]) == list(range(6, 14))
    assert ids(streams["everything"][0][1]) == list(range(1, 14))
    assert ids(streams["older"][0][1]) == list(range(2, 14))
    tool_frames = streams["tools"][0][1]
    assert [(f.id, f.event) for f in tool_frames] == [("8", "TOOL_INVOKED"), ("13", "STREAM_END")]
    _, frames = streams["everything"][0]
    assert frames[0].retry is not None and all(f.retry is None for f in frames[1:])
    assert [f.envelope["seq"] for f in frames] == list(range(1, 14))
    # Twelve clients: one call for the feed, one each for the two that caught up.
    assert catchups() - catchups_before == 2
    finished = events_process.wait_for_finished_streams(calls_before + 3)
    assert finished == calls_before + 3
    assert fanout.feeds == 0


def test_a_client_that_stops_reading_holds_nobody_back_and_the_buffer_stays_bounded(
    gateway: GatewayServer, events: events_pb2_grpc.EventServiceStub
) -> None:
    workflow_id = create(events)
    fanout = fanout_of(gateway)
    path = f"/api/v1/stream/sse?workflow_id={workflow_id}"
    stalled = RawClient(gateway, path)
    append(events, workflow_id, *progress(1))
    stalled.read_until(b"id: 1\r\n")
    catchups_before = catchups()
    count, size = 400, 12_000  # ~5 MB of frames: more than the sockets between can hold
    largest = 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        others = [pool.submit(read_stream, gateway.url, path) for _ in range(2)]
        wait_until(lambda: fanout.watchers == 3, "every client to join")
        for _ in range(count // 10):
            append(events, workflow_id, *progress(10, size))
            largest = max(largest, fanout.buffered_bytes())
        append(events, workflow_id, draft("WORKFLOW_COMPLETED"))
        # The others reach the end while the stalled client has read one event.
        results = [future.result() for future in others]
    expected = list(range(1, count + 4))
    assert all(status == 200 and ids(frames) == expected for status, frames in results)
    assert 0 < largest <= BUFFER_BYTES + 10 * (size + 500)
    assert fanout.buffered_bytes() <= BUFFER_BYTES + 10 * (size + 500)
    # Now it reads: it fell behind the feed's buffer, read on its own call, got everything.
    frames = stalled.read_to_end()
    assert ids(frames) == expected
    assert frames[-1].event == "STREAM_END"
    assert catchups() - catchups_before == 1


def test_an_events_service_restart_mid_stream_loses_and_repeats_nothing(
    gateway: GatewayServer,
    events: events_pb2_grpc.EventServiceStub,
    events_process: EventsProcess,
) -> None:
    workflow_id = create(events)
    fanout = fanout_of(gateway)
    path = f"/api/v1/stream/sse?workflow_id={workflow_id}"
    append(events, workflow_id, *progress(3))
    clients = [RawClient(gateway, path) for _ in range(3)]
    for client in clients:
        client.read_until(b"id: 3\r\n")
    assert fanout.feeds == 1
    events_process.kill()
    events_process.start()
    append(events, workflow_id, *progress(3), draft("WORKFLOW_COMPLETED"))
    for client in clients:
        frames = client.read_to_end()
        # One connection throughout, no error frame: the gateway rode out the restart.
        assert [(f.id, f.event) for f in frames][-2:] == [
            ("7", "WORKFLOW_COMPLETED"),
            ("8", "STREAM_END"),
        ]
        assert ids(frames) == list(range(1, 9))
        assert json.loads(frames[0].data)["seq"] == 1
