"""SSE resume, pings and history pages through the real gateway (uvicorn) and events service."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.events.helpers import draft
from tests.support.sse import Frame, parse_frames
from tests.support.stack import Stack, start_stack

pytestmark = pytest.mark.integration

# With auth off every gateway caller is the default tenant.
TENANT = tenant_metadata("default")


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = start_stack(Path(tmp_path_factory.mktemp("events-routes")))
    yield stack
    stack.stop()


@pytest.fixture
async def events(running: Stack) -> AsyncIterator[events_pb2_grpc.EventServiceAsyncStub]:
    async with running.channel("events") as channel:
        yield events_pb2_grpc.EventServiceStub(channel)


async def new_workflow(events: events_pb2_grpc.EventServiceAsyncStub, count: int) -> str:
    created = await events.CreateWorkflow(events_pb2.CreateWorkflowRequest(), metadata=TENANT)
    await events.Append(
        events_pb2.AppendRequest(
            workflow_id=created.workflow_id,
            events=[draft("PROGRESS", {"step": n}) for n in range(count)],
        ),
        metadata=TENANT,
    )
    return str(created.workflow_id)


class SseReader:
    """Reads an open SSE response line by line, frame by frame."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()
        self.lines: list[str] = []

    async def until(self, done: Callable[[list[Frame], int], bool]) -> tuple[list[Frame], int]:
        frames, comments = parse_frames(self.lines)
        while not done(frames, comments):
            line = await anext(self._lines)
            self.lines.append(line.rstrip("\r"))
            if line.strip() == "" or line.startswith(":"):
                frames, comments = parse_frames(self.lines)
        return frames, comments

    async def rest(self) -> list[Frame]:
        async for line in self._lines:
            self.lines.append(line.rstrip("\r"))
        return parse_frames(self.lines)[0]


async def test_live_sse_resumes_exactly_pings_while_idle_and_closes_after_stream_end(
    running: Stack, events: events_pb2_grpc.EventServiceAsyncStub
) -> None:
    workflow_id = await new_workflow(events, 5)
    async with (
        httpx.AsyncClient(base_url=running.gateway, timeout=60) as client,
        client.stream(
            "GET",
            f"/api/v1/stream/sse?workflow_id={workflow_id}",
            headers={"Last-Event-ID": "2"},
        ) as response,
    ):
        assert response.status_code == 200
        reader = SseReader(response)
        frames, _ = await reader.until(lambda frames, _: len(frames) >= 3)
        assert [frame.id for frame in frames] == ["3", "4", "5"]  # exactly the missed ones
        assert frames[0].retry is not None
        # Nothing happens for a while: the gateway keeps the connection alive with a ping.
        _, comments = await reader.until(lambda _, comments: comments >= 1)
        assert comments >= 1
        await events.Append(
            events_pb2.AppendRequest(workflow_id=workflow_id, events=[draft("WORKFLOW_COMPLETED")]),
            metadata=TENANT,
        )
        frames = await reader.rest()  # the server closes the stream after STREAM_END
    assert [(f.id, f.event) for f in frames[3:]] == [
        ("6", "WORKFLOW_COMPLETED"),
        ("7", "STREAM_END"),
    ]


async def test_a_resume_point_beyond_the_log_is_answered_at_once(
    running: Stack, events: events_pb2_grpc.EventServiceAsyncStub
) -> None:
    workflow_id = await new_workflow(events, 3)
    sse = f"/api/v1/stream/sse?workflow_id={workflow_id}"
    react = f"/api/v1/tasks/{workflow_id}/stream"
    async with httpx.AsyncClient(base_url=running.gateway, timeout=60) as client:
        # A log still going: a seq it has not reached is refused, naming its last seq.
        for path, headers in (
            (sse, {"Last-Event-ID": "4"}),
            (f"{sse}&last_event_id=99", {}),
            (react, {"Last-Event-ID": "4-0"}),
            (f"{react}?dialect=fim&last_event_id=1000000", {}),
        ):
            refused = await client.get(path, headers=headers)
            assert refused.status_code == 400, path
            error = refused.json()["error"]
            assert error["code"] == "invalid_argument"
            assert "whose last seq is 3" in error["message"], error

        # Its last seq itself is an ordinary resume: what comes next arrives.
        async with client.stream("GET", sse, headers={"Last-Event-ID": "3"}) as resumed:
            assert resumed.status_code == 200
            await events.Append(
                events_pb2.AppendRequest(
                    workflow_id=workflow_id, events=[draft("WORKFLOW_COMPLETED")]
                ),
                metadata=TENANT,
            )
            frames = await SseReader(resumed).rest()
        assert [(f.id, f.event) for f in frames] == [
            ("4", "WORKFLOW_COMPLETED"),
            ("5", "STREAM_END"),
        ]

        # An ended log: past its end (or at it), the stream is over at once, with no frames.
        for path, headers in (
            (sse, {"Last-Event-ID": "6"}),
            (f"{sse}&last_event_id=99", {}),
            (sse, {"Last-Event-ID": "5"}),
            (react, {"Last-Event-ID": "1000"}),
        ):
            async with client.stream("GET", path, headers=headers) as ended:
                assert ended.status_code == 200, path
                assert await SseReader(ended).rest() == [], path
        assert (await client.get("/healthz")).status_code == 200


def test_query_resume_point_and_history_pages(running: Stack, events_workflow: str) -> None:
    with httpx.Client(base_url=running.gateway, timeout=30) as client:
        page = client.get(f"/api/v1/tasks/{events_workflow}/events?from_seq=2&limit=2").json()
        assert [e["seq"] for e in page["events"]] == [2, 3]
        assert page["next_seq"] == 4
        last = client.get(f"/api/v1/tasks/{events_workflow}/events?from_seq=4&limit=10").json()
        assert [e["type"] for e in last["events"]] == ["WORKFLOW_COMPLETED", "STREAM_END"]
        assert last["next_seq"] is None
        too_many = client.get(f"/api/v1/tasks/{events_workflow}/events?limit=1001")
        assert too_many.status_code in (400, 422)
        assert "error" in too_many.json()


@pytest.fixture
def events_workflow(running: Stack) -> str:
    """A finished workflow with a long tool observation, written straight to the events service."""

    async def write() -> str:
        async with running.channel("events") as channel:
            stub = events_pb2_grpc.EventServiceStub(channel)
            created = await stub.CreateWorkflow(events_pb2.CreateWorkflowRequest(), metadata=TENANT)
            await stub.Append(
                events_pb2.AppendRequest(
                    workflow_id=created.workflow_id,
                    events=[
                        draft("PROGRESS"),
                        draft("TOOL_OBSERVATION", {"tool_name": "t", "result": "y" * 3000}),
                        draft("PROGRESS"),
                        draft("WORKFLOW_COMPLETED"),
                    ],
                ),
                metadata=TENANT,
            )
            return str(created.workflow_id)

    return asyncio.run(write())


def test_history_with_full_results(running: Stack, events_workflow: str) -> None:
    with httpx.Client(base_url=running.gateway, timeout=30) as client:
        cut = client.get(f"/api/v1/tasks/{events_workflow}/events?types=TOOL_OBSERVATION").json()
        full = client.get(
            f"/api/v1/tasks/{events_workflow}/events?types=TOOL_OBSERVATION&full_results=true"
        ).json()
    assert len(cut["events"][0]["payload"]["result"]) == 2000
    assert cut["events"][0]["payload"]["truncated"] is True
    assert full["events"][0]["payload"]["result"] == "y" * 3000


async def test_payloads_with_escaped_lone_surrogates_reach_every_reader(
    running: Stack, events: events_pb2_grpc.EventServiceAsyncStub
) -> None:
    # Valid JSON (what Python's json.dumps writes for a surrogate-escaped file name) whose
    # parsed text UTF-8 cannot hold: rendering it naively broke the workflow's SSE feed.
    created = await events.CreateWorkflow(events_pb2.CreateWorkflowRequest(), metadata=TENANT)
    workflow_id = created.workflow_id
    observation = {"tool_name": "read", "result": "\ud83d" + "y" * 3000}
    await events.Append(
        events_pb2.AppendRequest(
            workflow_id=workflow_id,
            events=[
                draft("PROGRESS", {"path": "caf\udce9.txt"}),
                draft("TOOL_OBSERVATION", observation),
                draft("WORKFLOW_COMPLETED", {"result": "done \udce9"}),
            ],
        ),
        metadata=TENANT,
    )
    async with httpx.AsyncClient(base_url=running.gateway, timeout=60) as client:
        async with client.stream("GET", f"/api/v1/stream/sse?workflow_id={workflow_id}") as sse:
            frames = await SseReader(sse).rest()
        assert [f.event for f in frames] == [
            "PROGRESS",
            "TOOL_OBSERVATION",
            "WORKFLOW_COMPLETED",
            "STREAM_END",
        ]
        assert json.loads(frames[0].data)["payload"] == {"path": "caf\udce9.txt"}
        shown = json.loads(frames[1].data)["payload"]["result"]
        assert shown == ("\ufffd" + "y" * 3000)[:2000]  # cut, so stored as text
        async with client.stream(
            "GET", f"/api/v1/stream/sse?workflow_id={workflow_id}&dialect=fim"
        ) as fim:
            assert fim.status_code == 200
            assert len(await SseReader(fim).rest()) >= 4
        history = await client.get(f"/api/v1/tasks/{workflow_id}/events?full_results=true")
    assert history.status_code == 200
    payloads = [e["payload"] for e in history.json()["events"]]
    assert payloads[0] == {"path": "caf\udce9.txt"}
    assert payloads[1]["result"] == "\ufffd" + "y" * 3000
    assert payloads[2] == {"result": "done \udce9"}
