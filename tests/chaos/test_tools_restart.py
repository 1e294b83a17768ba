"""The tools service is killed (-9) while every run has a tool call in flight, and started
again on the same port. Each call comes back to the model as a clear failed observation
(tools are not retried: a call may have had effects), every run still completes with a
sound log, and the next task uses the restarted service."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from tests.chaos.conftest import MODEL_LATENCY_SECONDS, Scale
from tests.chaos.harness import assert_clean, read_log, record_row, wait_until
from tests.chaos.scenario import scenario
from tests.support.gate import Gate
from tests.support.models import arithmetic_model
from tests.support.processes import restart_supervised
from tests.support.scripted_openai import Reply, ScriptedOpenAI, text, tool_call
from tests.support.stack import Stack, start_stack
from tests.support.threaded_server import ThreadedServer

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

FAILED_CALL = "web_fetch could not run: UNAVAILABLE"


class SlowPage:
    """An HTTP page that answers only once the test lets it: tool calls held in flight."""

    def __init__(self) -> None:
        self.arrivals = 0
        self.release = Gate()
        self._lock = threading.Lock()
        self._server = ThreadedServer(
            Starlette(routes=[Route("/slow", self._slow)]), lifespan="off", name="slow page"
        )
        self.url = ""

    async def _slow(self, request: Request) -> Response:
        with self._lock:
            self.arrivals += 1
        await self.release.wait()
        return PlainTextResponse("finally")

    def start(self) -> SlowPage:
        self.url = f"http://127.0.0.1:{self._server.start()}/slow"
        return self

    def stop(self) -> None:
        self.release.open()
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


@pytest.fixture
def fetching_stack(page: SlowPage, tmp_path: Path) -> Iterator[Stack]:
    model = ScriptedOpenAI(handler=fetching_model(page.url)).start()
    model.latency_seconds = MODEL_LATENCY_SECONDS
    stack = start_stack(
        tmp_path,
        model.base_url,
        # The page is on loopback; the calls stay held however long the runs take to start.
        extra_env={
            "SHUTTLE_HTTP_ALLOW_HOSTS": '["127.0.0.1"]',
            "SHUTTLE_TOOL_TIMEOUT_SECONDS": "300",
        },
    )
    try:
        yield stack
    finally:
        stack.stop()
        model.stop()


def restart_timed(stack: Stack) -> float:
    """Kill -9 and restart the tools service; seconds until it served again."""
    started = time.monotonic()
    restart_supervised(stack.supervisor, "tools")
    return time.monotonic() - started


async def test_tools_restarted_mid_call(
    fetching_stack: Stack, page: SlowPage, scale: Scale
) -> None:
    stack = fetching_stack
    async with scenario(stack) as chaos:
        ids = await chaos.start_runs(scale.runs, "Please fetch the slow page, tools-restarted")
        chaos.subscribe_to_every_run(scale.subscribers_per_run)

        async def every_call_reached_the_page() -> bool:
            return page.arrivals >= len(ids)

        await wait_until(every_call_reached_the_page, "every run's tool call reached the page")
        killed_at = time.monotonic()
        restarting = asyncio.create_task(asyncio.to_thread(restart_timed, stack))

        async def every_subscriber_has_its_failed_call() -> bool:
            return all(
                any(e["type"] == "TOOL_OBSERVATION" for e in s.events) for s in chaos.subscriptions
            )

        await wait_until(every_subscriber_has_its_failed_call, "the failed calls are reported")
        recovery = time.monotonic() - killed_at
        serving_again = await restarting
        audits = await chaos.finish()
        logs = {wf: await read_log(chaos.channel, wf) for wf in ids}

    record_row(
        "tools-restarted",
        "tools service killed (-9) with a call in flight in every run, restarted",
        scale.name,
        audits,
        chaos.subscriptions,
        recovery,
        "kill to every subscriber receiving its run's failed observation "
        f"(the service served again after {serving_again:.2f} s)",
    )
    assert_clean(audits)
    assert page.arrivals == len(ids)  # nothing retried the calls
    for workflow_id in ids:
        log = logs[workflow_id]
        assert [e["type"] for e in log][-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
        (observation,) = [e for e in log if e["type"] == "TOOL_OBSERVATION"]
        failure = observation["payload"]
        assert failure["tool_name"] == "web_fetch"
        assert FAILED_CALL in failure["error"]
        assert failure["result"] == failure["error"]  # what the model was shown
        assert "could not" in log[-2]["payload"]["result"]

    # The next task's tool call goes to the restarted service and succeeds.
    async with scenario(stack) as after:
        (workflow_id,) = await after.start_runs(1, "After the restart, what is 6*7?")
        after.subscribe_to_every_run(scale.subscribers_per_run)
        assert_clean(await after.finish())
        log = await read_log(after.channel, workflow_id)
        task = (await after.client.get(f"/api/v1/tasks/{workflow_id}")).json()
    (observation,) = [e for e in log if e["type"] == "TOOL_OBSERVATION"]
    assert observation["payload"]["result"] == "42"
    assert not observation["payload"]["error"]
    assert task["status"] == "completed", task
