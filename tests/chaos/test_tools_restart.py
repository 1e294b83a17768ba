"""Fault: the tools service is killed while a tool call is in flight and started again on
the same port. The call comes back to the model as a clear failed observation (tools are not
retried: a call may have had effects), the run still ends with a gap-free log, and the next
task uses the restarted service."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from tests.support.models import arithmetic_model
from tests.support.processes import restart_supervised
from tests.support.scripted_openai import Reply, ScriptedOpenAI, text, tool_call
from tests.support.sse import LiveStream
from tests.support.stack import start_stack
from tests.support.threaded_server import ThreadedServer

pytestmark = pytest.mark.integration


class SlowPage:
    """An HTTP page that answers only once the test lets it: a tool call held in flight."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.release = threading.Event()
        self._server = ThreadedServer(
            Starlette(routes=[Route("/slow", self._slow)]), lifespan="off", name="slow page"
        )
        self.url = ""

    async def _slow(self, request: Request) -> Response:
        self.arrived.set()
        await asyncio.to_thread(self.release.wait, 120)
        return PlainTextResponse("finally")

    def start(self) -> SlowPage:
        self.url = f"http://127.0.0.1:{self._server.start()}/slow"
        return self

    def stop(self) -> None:
        self.release.set()
        self._server.stop()


def fetching_model(url: str) -> Any:
    """Fetches `url` for a task that asks to, reporting what the tool said; other tasks are
    arithmetic."""

    def reply(body: dict[str, Any]) -> Reply:
        question = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if "fetch" not in question:
            return arithmetic_model(body)
        last = body["messages"][-1]
        if body.get("stream"):
            return text("The page could not be fetched.")
        if last["role"] == "tool":
            return text(f"The tool said: {last['content']}")
        return tool_call("web_fetch", {"url": url}, call_id="call_fetch")

    return reply


@pytest.fixture
def page() -> Iterator[SlowPage]:
    started = SlowPage().start()
    yield started
    started.stop()


def run(gateway: str, query: str) -> tuple[str, LiveStream]:
    created = httpx.post(
        f"{gateway}/api/v1/tasks", json={"query": query, "mode": "standard"}, timeout=30
    )
    assert created.status_code == 201, created.text
    workflow_id = created.json()["workflow_id"]
    return workflow_id, LiveStream(gateway, f"/api/v1/stream/sse?workflow_id={workflow_id}")


def test_tools_restarted_mid_call(tmp_path: Path, page: SlowPage) -> None:
    model = ScriptedOpenAI(handler=fetching_model(page.url)).start()
    stack = start_stack(
        tmp_path, model.base_url, extra_env={"SHUTTLE_HTTP_ALLOW_HOSTS": '["127.0.0.1"]'}
    )
    try:
        _, stream = run(stack.gateway, "Please fetch the slow page")
        assert page.arrived.wait(60), "the tool call never reached the page"
        restart_supervised(stack.supervisor, "tools")
        frames = stream.join()

        types = [frame.event for frame in frames]
        assert types[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
        assert [int(frame.id or 0) for frame in frames] == list(range(1, len(frames) + 1))
        (observation,) = [f.envelope for f in frames if f.event == "TOOL_OBSERVATION"]
        failure = observation["payload"]
        assert failure["tool_name"] == "web_fetch"
        assert "web_fetch could not run: UNAVAILABLE" in failure["error"]
        assert failure["result"] == failure["error"]  # what the model was shown
        answer = json.loads(frames[-2].data)["payload"]["result"]
        assert "could not" in answer

        workflow_id, second = run(stack.gateway, "What is 6*7?")
        frames = second.join()
        assert [frame.event for frame in frames][-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
        (observation,) = [f.envelope for f in frames if f.event == "TOOL_OBSERVATION"]
        assert observation["payload"]["result"] == "42"
        assert not observation["payload"]["error"]
        task = httpx.get(f"{stack.gateway}/api/v1/tasks/{workflow_id}", timeout=30).json()
        assert task["status"] == "completed", task
    finally:
        stack.stop()
        model.stop()
