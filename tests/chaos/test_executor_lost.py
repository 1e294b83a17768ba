"""The executor that owns the runs is killed (-9) mid-run.

With another executor running, it claims each run once the lease lapses, appends
ERROR_RECOVERY{recovery_action: "resumed"} and finishes it: every run completes with the
answer an uninterrupted run gives, and the log loses and repeats nothing. With no executor
left, each run stays claimable for SHUTTLE_EVENTS_ORPHAN_SECONDS, then the events service
ends it with a fatal ERROR_OCCURRED (EXECUTOR_LOST) and STREAM_END, so every browser's
stream ends instead of hanging, and the task shows as failed even before an executor is
back."""

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
from tests.chaos.harness import (
    assert_clean,
    is_resumption,
    is_terminal,
    read_log,
    record_row,
    wait_until,
)
from tests.chaos.model import ANSWER_WORDS, ChaosModel
from tests.chaos.scenario import Scenario, scenario
from tests.support.gate import Gate
from tests.support.processes import restart_supervised, start_service_process, stop_process
from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.stack import Stack, start_stack

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

LEASE_SECONDS = 1.5
SWEEP_SECONDS = 0.5
TAKEOVER_POLL_SECONDS = 0.2
ORPHAN_SECONDS = 2.0
# Lease and orphan time bound how long a dead executor's streams stay open: one still open a
# minute past them is hanging, not slow.
STREAMS_END_WITHIN_SECONDS = LEASE_SECONDS + ORPHAN_SECONDS + SWEEP_SECONDS + 60
HELD_AFTER_TOOL_RESULTS = 1
TOOL_STEPS = ChaosModel().tool_steps


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
    """The embedded stack with short run leases, swept often, orphans ended soon."""
    stack = start_stack(
        tmp_path,
        holding_model.base_url,
        extra_env={
            "SHUTTLE_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
            "SHUTTLE_RUN_TAKEOVER_POLL_SECONDS": str(TAKEOVER_POLL_SECONDS),
            "SHUTTLE_EVENTS_LEASE_SWEEP_SECONDS": str(SWEEP_SECONDS),
            "SHUTTLE_EVENTS_ORPHAN_SECONDS": str(ORPHAN_SECONDS),
        },
    )
    yield stack
    stack.stop()


@pytest.fixture
def second_executor(leased_stack: Stack, tmp_path: Path) -> Iterator[None]:
    """Another executor on the same events service, which the gateway does not dial: it
    gets runs only by taking them over."""
    env = leased_stack.supervisor.environment()
    env.pop("SHUTTLE_EXECUTOR_PORT")
    env["SHUTTLE_EVENTS_ORPHAN_SECONDS"] = str(ORPHAN_SECONDS)
    process, _ = start_service_process("executor", env, tmp_path / "executor-2.log")
    yield
    stop_process(process)


def kill(stack: Stack, name: str) -> None:
    process = stack.supervisor.processes[name]
    process.kill()
    process.wait()


async def hold_every_run(chaos: Scenario, holding_model: HoldingModel, runs: int) -> None:
    """Until every run is mid-run: a tool used, its next model call held."""
    await chaos.wait_until_mid_run()

    async def every_run_waits_on_the_model() -> bool:
        return len(holding_model.held) == runs

    await wait_until(every_run_waits_on_the_model, "every run waits on the model")


@pytest.mark.usefixtures("second_executor")
async def test_runs_of_a_killed_executor_resume_on_another(
    leased_stack: Stack, holding_model: HoldingModel, scale: Scale
) -> None:
    stack = leased_stack
    async with scenario(stack) as chaos:
        ids = await chaos.start_runs(scale.runs, "executor-lost")
        chaos.subscribe_to_every_run(scale.subscribers_per_run)
        await hold_every_run(chaos, holding_model, len(ids))
        killed_at = time.monotonic()
        await asyncio.to_thread(kill, stack, "executor")
        holding_model.release.open()

        async def every_run_resumed() -> bool:
            ended = [e for s in chaos.subscriptions for e in s.events if is_terminal(e)]
            assert not ended, f"a run ended before it was resumed: {ended[0]['payload']}"
            return all(any(map(is_resumption, s.events)) for s in chaos.subscriptions)

        await wait_until(every_run_resumed, "every subscriber sees its run resumed")
        recovery = time.monotonic() - killed_at
        audits = await chaos.finish(resumable=True)
        logs = {wf: await read_log(chaos.channel, wf) for wf in ids}
        tasks = {wf: (await chaos.client.get(f"/api/v1/tasks/{wf}")).json() for wf in ids}

    record_row(
        "executor-lost",
        f"executor owning the runs killed (-9) mid-run, another one running; "
        f"lease {LEASE_SECONDS:g} s",
        scale.name,
        audits,
        chaos.subscriptions,
        recovery,
        "kill to every subscriber receiving its run's ERROR_RECOVERY (resumed)",
    )
    assert_clean(audits)
    words = " ".join(f"w{i}" for i in range(ANSWER_WORDS))
    for workflow_id in ids:
        log = logs[workflow_id]
        assert [e["type"] for e in log][-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
        (resumed,) = [e["payload"] for e in log if is_resumption(e)]
        assert resumed["error_type"] == "EXECUTOR_LOST", resumed
        results = [e["payload"]["result"] for e in log if e["type"] == "TOOL_OBSERVATION"]
        assert results == [str(7 * n) for n in range(1, TOOL_STEPS + 1)], results
        # The answer the model gives a run that went through undisturbed: it echoes the
        # synthesis prompt, so a step lost or taken twice would show in it.
        steps = "\n".join(
            f'{n}. calculator({{"expression": "{n}*7"}}) → {7 * n}'
            for n in range(1, TOOL_STEPS + 1)
        )
        prompt = (
            f"Question: {log[0]['payload']['query']}\n\nSteps taken:\n{steps}\n\n"
            f"Draft answer from the agent:\nDone after {TOOL_STEPS} calculations.\n\n"
            "Write the final answer."
        )
        assert log[-2]["payload"]["result"] == f"Answer to {prompt}: {words}."
        assert tasks[workflow_id]["status"] == "completed", tasks[workflow_id]


async def test_runs_with_no_executor_left_end_executor_lost(
    leased_stack: Stack, holding_model: HoldingModel, scale: Scale
) -> None:
    stack = leased_stack
    async with scenario(stack) as chaos:
        ids = await chaos.start_runs(scale.runs, "executor-orphaned")
        chaos.subscribe_to_every_run(scale.subscribers_per_run)
        await hold_every_run(chaos, holding_model, len(ids))
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
        "executor-orphaned",
        f"the only executor killed (-9) mid-run, none started again; lease {LEASE_SECONDS:g} s",
        scale.name,
        audits,
        chaos.subscriptions,
        recovery,
        f"kill to every stream's STREAM_END (lease {LEASE_SECONDS:g} s, orphaned after "
        f"{ORPHAN_SECONDS:g} s more, swept every {SWEEP_SECONDS:g} s)",
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
        assert not any(map(is_resumption, log))
        (lost,) = [e for e in log if e["type"] == "ERROR_OCCURRED"]
        payload = lost["payload"]
        assert payload["error_type"] == "EXECUTOR_LOST"
        assert (payload["fatal"], payload["recoverable"]) == (True, False)
        assert payload["lost_owner"] and payload["error_message"], payload

        task = tasks[workflow_id]
        assert task["status"] == "failed", task
        assert task["error"], task
        assert task["last_seq"] == by_id[workflow_id].last_seq
        durable = [event["seq"] for event in histories[workflow_id]["events"]]
        assert durable == sorted(set(durable)) and durable[-1] == task["last_seq"]

    # Once an executor is back, new tasks run again.
    await asyncio.to_thread(restart_supervised, stack.supervisor, "executor")
    async with scenario(stack) as after:
        await after.start_runs(1, "after the executor restarted")
        after.subscribe_to_every_run(scale.subscribers_per_run)
        assert_clean(await after.finish())
