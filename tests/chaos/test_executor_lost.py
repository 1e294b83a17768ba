"""The executor that owns the runs is killed (-9) mid-run. Its leases lapse and the events
service ends each run with a fatal ERROR_OCCURRED (EXECUTOR_LOST) and STREAM_END, so every
browser's stream ends instead of hanging; the log loses and repeats nothing, and the task
shows as failed even before an executor is back."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.chaos.conftest import MODEL_LATENCY_SECONDS, Scale
from tests.chaos.harness import assert_clean, read_log, record_row, wait_until
from tests.chaos.model import ChaosModel
from tests.chaos.scenario import scenario
from tests.support.gate import Gate
from tests.support.processes import restart_supervised
from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.stack import Stack, start_stack

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

LEASE_SECONDS = 2.0
SWEEP_SECONDS = 0.5
# The lease bounds how long a dead executor's streams stay open: one still open a minute
# past lease and sweep is hanging, not slow.
STREAMS_END_WITHIN_SECONDS = LEASE_SECONDS + SWEEP_SECONDS + 60
HELD_AFTER_TOOL_RESULTS = 1


class HoldingModel(ScriptedOpenAI):
    """The chaos model, except that each run's model call after its first tool result waits
    until `release` is set: every run is mid-model-call, with more to do, when its executor
    dies."""

    def __init__(self) -> None:
        super().__init__(handler=ChaosModel())
        self.latency_seconds = MODEL_LATENCY_SECONDS
        self.release = Gate()
        self.held: set[str] = set()
        """The questions (one per run) whose call is being held."""
        self._held_lock = threading.Lock()

    async def _completions(self, request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        messages = body["messages"]
        done = sum(1 for m in messages if m["role"] == "tool")
        held = done == HELD_AFTER_TOOL_RESULTS and not body.get("stream")
        if held and not self.release.is_open:
            question = next(str(m["content"]) for m in messages if m["role"] == "user")
            with self._held_lock:
                self.held.add(question)
            await self.release.wait()
            # Nobody reads this: the executor that asked is dead.
            return JSONResponse({"error": {"message": "released by the test"}}, status_code=503)
        return await super()._completions(request)


@pytest.fixture
def holding_model() -> Iterator[HoldingModel]:
    server = HoldingModel()
    server.start()
    yield server
    server.release.open()
    server.stop()


@pytest.fixture
def leased_stack(holding_model: HoldingModel, tmp_path: Path) -> Iterator[Stack]:
    """The embedded stack with short run leases, swept often."""
    stack = start_stack(
        tmp_path,
        holding_model.base_url,
        extra_env={
            "SHUTTLE_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
            "SHUTTLE_EVENTS_LEASE_SWEEP_SECONDS": str(SWEEP_SECONDS),
        },
    )
    yield stack
    stack.stop()


def kill(stack: Stack, name: str) -> None:
    process = stack.supervisor.processes[name]
    process.kill()
    process.wait()


async def test_runs_of_a_killed_executor_end_with_executor_lost(
    leased_stack: Stack, holding_model: HoldingModel, scale: Scale
) -> None:
    stack = leased_stack
    async with scenario(stack) as chaos:
        ids = await chaos.start_runs(scale.runs, "executor-lost")
        chaos.subscribe_to_every_run(scale.subscribers_per_run)

        await chaos.wait_until_mid_run()

        async def every_run_waits_on_the_model() -> bool:
            return len(holding_model.held) == len(ids)

        await wait_until(every_run_waits_on_the_model, "every run waits on the model")
        at_fault = await chaos.positions()
        killed_at = time.monotonic()
        await asyncio.to_thread(kill, stack, "executor")
        holding_model.release.open()

        async def every_stream_ended() -> bool:
            return all(sub.ended for sub in chaos.subscriptions)

        await wait_until(
            every_stream_ended,
            "every stream of the lost runs ended",
            timeout_seconds=STREAMS_END_WITHIN_SECONDS,
        )
        recovery = time.monotonic() - killed_at
        audits = await chaos.finish(terminal="ERROR_OCCURRED")
        logs = {wf: await read_log(chaos.channel, wf) for wf in ids}

        # What the user sees while no executor is running.
        tasks = {wf: (await chaos.client.get(f"/api/v1/tasks/{wf}")).json() for wf in ids}
        histories = {
            wf: (
                await chaos.client.get(f"/api/v1/tasks/{wf}/events", params={"limit": 1000})
            ).json()
            for wf in ids
        }

    record_row(
        "executor-lost",
        f"executor owning the runs killed (-9) mid-run; lease {LEASE_SECONDS:g} s",
        scale.name,
        audits,
        chaos.subscriptions,
        recovery,
        f"kill to every stream's STREAM_END (lease {LEASE_SECONDS:g} s, "
        f"swept every {SWEEP_SECONDS:g} s)",
    )
    assert_clean(audits)
    for sub in chaos.subscriptions:
        assert sub.connections >= 1, sub.errors
        assert [e["type"] for e in sub.events][-2:] == ["ERROR_OCCURRED", "STREAM_END"]
    by_id = {audit.workflow_id: audit for audit in audits}
    for workflow_id in ids:
        log = logs[workflow_id]
        # The fault hit every run mid-way: it was ended after the kill, not finished.
        assert by_id[workflow_id].last_seq > at_fault[workflow_id]
        (lost,) = [e for e in log if e["type"] == "ERROR_OCCURRED"]
        payload = lost["payload"]
        assert payload["error_type"] == "EXECUTOR_LOST"
        assert (payload["fatal"], payload["recoverable"]) == (True, False)
        assert "Retry the task" in payload["error_message"]
        assert payload["lost_owner"] in payload["error_message"]

        task = tasks[workflow_id]
        assert task["status"] == "failed", task
        assert "stopped responding" in task["error"]
        assert task["last_seq"] == by_id[workflow_id].last_seq
        durable = [event["seq"] for event in histories[workflow_id]["events"]]
        assert durable == sorted(set(durable)) and durable[-1] == task["last_seq"]

    # Once an executor is back, new tasks run again.
    await asyncio.to_thread(restart_supervised, stack.supervisor, "executor")
    async with scenario(stack) as after:
        await after.start_runs(1, "after the executor restarted")
        after.subscribe_to_every_run(scale.subscribers_per_run)
        assert_clean(await after.finish())
