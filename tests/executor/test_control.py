"""Pause, resume, cancel and interrupts sent to a second executor process, acted on by the
executor that owns the run; and a whole run streamed over ExecutorService.Run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from shuttle.grpc_client import open_channel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.v1 import common_pb2, events_pb2, executor_pb2, executor_pb2_grpc
from tests.executor.conftest import TENANT, Backends, as_dict, first, of_type, types_of
from tests.support.agent_model import AgentModel, Step, answer, calc
from tests.support.processes import start_service_process, stop_process
from tests.support.scripted_openai import Reply, ScriptedOpenAI

pytestmark = pytest.mark.integration

PAUSE = executor_pb2.CONTROL_ACTION_PAUSE
RESUME = executor_pb2.CONTROL_ACTION_RESUME
CANCEL = executor_pb2.CONTROL_ACTION_CANCEL


@pytest.fixture
def server() -> Iterator[ScriptedOpenAI]:
    started = ScriptedOpenAI().start()
    yield started
    started.stop()


@pytest.fixture
async def second_executor(
    backends: Backends, tmp_path: Path
) -> AsyncIterator[executor_pb2_grpc.ExecutorServiceAsyncStub]:
    """Another executor replica, in its own process, sharing the events service."""
    env = {
        f"SHUTTLE_{name.upper()}_ADDR": f"127.0.0.1:{port}" for name, port in backends.ports.items()
    }
    process, port = await asyncio.to_thread(
        start_service_process, "executor", env, tmp_path / "executor-b.log"
    )
    channel = open_channel(f"127.0.0.1:{port}")
    yield executor_pb2_grpc.ExecutorServiceStub(channel)
    await channel.close()
    await asyncio.to_thread(stop_process, process)


@dataclass
class Gate:
    """Holds the model's second reply until the test lets it go."""

    reached: threading.Event
    release: threading.Event

    def during(self) -> None:
        self.reached.set()
        assert self.release.wait(30)


def gated_script() -> tuple[AgentModel, Gate]:
    gate = Gate(threading.Event(), threading.Event())
    held = calc("2+2")
    held.during = gate.during
    return AgentModel(calc("1+1"), held, answer("2 and 4"), synthesis="2 and 4."), gate


async def start_on_first(
    backends: Backends, server: ScriptedOpenAI, script: AgentModel
) -> tuple[str, executor_pb2_grpc.ExecutorServiceAsyncStub]:
    server.set_handler(script)
    llm = OpenAIModel(server.base_url, "test-key", "scripted-model", 10.0, 0)
    owner, _ = await backends.serve(backends.run_manager(llm, completion_check=False))
    started = await owner.StartRun(executor_pb2.StartRunRequest(query="1+1, 2+2", tenant_id=TENANT))
    return started.workflow_id, owner


async def control(
    stub: executor_pb2_grpc.ExecutorServiceAsyncStub, workflow_id: str, action: Any
) -> executor_pb2.ControlResponse:
    return await stub.Control(
        executor_pb2.ControlRequest(
            workflow_id=workflow_id, tenant_id=TENANT, action=action, reason="test"
        )
    )


async def refused(
    stub: executor_pb2_grpc.ExecutorServiceAsyncStub, workflow_id: str, action: Any
) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await control(stub, workflow_id, action)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    return caught.value.details() or ""


async def wait_for(backends: Backends, workflow_id: str, type_: str) -> None:
    stream = backends.events.Stream(
        events_pb2.StreamRequest(workflow_id=workflow_id, tenant_id=TENANT, from_seq=1)
    )
    async for event in stream:
        if as_dict(event)["type"] == type_:
            stream.cancel()
            return
    raise AssertionError(f"the log ended without {type_}")


async def held_at_work(backends: Backends, gate: Gate, workflow_id: str) -> None:
    """Wait until the model call is held and the log shows the run at work: the engine queues
    its events and commands are checked against the log (the held call began with
    AGENT_THINKING)."""
    assert await asyncio.to_thread(gate.reached.wait, 30)
    await wait_for(backends, workflow_id, "AGENT_THINKING")


async def test_pause_and_resume_from_another_replica(
    backends: Backends,
    server: ScriptedOpenAI,
    second_executor: executor_pb2_grpc.ExecutorServiceAsyncStub,
) -> None:
    script, gate = gated_script()
    workflow_id, _ = await start_on_first(backends, server, script)
    await held_at_work(backends, gate, workflow_id)

    paused = await control(second_executor, workflow_id, PAUSE)
    assert paused.status == common_pb2.WORKFLOW_STATUS_RUNNING  # it pauses at a checkpoint
    assert "already paused" in await refused(second_executor, workflow_id, PAUSE)
    gate.release.set()
    await wait_for(backends, workflow_id, "WORKFLOW_PAUSED")
    assert (await backends.workflow(workflow_id)).status == common_pb2.WORKFLOW_STATUS_PAUSED
    calls_while_paused = len(script.loop_calls)

    await control(second_executor, workflow_id, RESUME)
    events = await backends.read_log(workflow_id)

    order = types_of(events)
    pausing, paused_at, resumed = (
        order.index(t) for t in ("WORKFLOW_PAUSING", "WORKFLOW_PAUSED", "WORKFLOW_RESUMED")
    )
    assert pausing < paused_at < resumed
    assert resumed == paused_at + 1  # nothing ran while paused
    assert first(events, "WORKFLOW_PAUSED")["payload"]["checkpoint"] in ("tool_batch", "llm_call")
    assert len(script.loop_calls) == calls_while_paused + 1
    assert order[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert (await backends.workflow(workflow_id)).status == common_pb2.WORKFLOW_STATUS_COMPLETED
    assert "completed" in await refused(second_executor, workflow_id, RESUME)


async def test_cancel_from_another_replica_stops_at_the_next_checkpoint(
    backends: Backends,
    server: ScriptedOpenAI,
    second_executor: executor_pb2_grpc.ExecutorServiceAsyncStub,
) -> None:
    script, gate = gated_script()
    workflow_id, _ = await start_on_first(backends, server, script)
    await held_at_work(backends, gate, workflow_id)

    await control(second_executor, workflow_id, CANCEL)
    assert "being cancelled" in await refused(second_executor, workflow_id, CANCEL)
    gate.release.set()
    events = await backends.read_log(workflow_id)

    assert types_of(events)[-2:] == ["WORKFLOW_CANCELLED", "STREAM_END"]
    cancelled = first(events, "WORKFLOW_CANCELLED")["payload"]
    assert cancelled["reason"] == "test"
    assert cancelled["total_tokens"] > 0
    after_request = types_of(events)[types_of(events).index("WORKFLOW_CANCELLING") :]
    assert "THREAD_MESSAGE_COMPLETED" not in after_request
    assert "WORKFLOW_COMPLETED" not in types_of(events)
    assert not script.synthesis_calls
    workflow = await backends.workflow(workflow_id)
    assert workflow.status == common_pb2.WORKFLOW_STATUS_CANCELLED
    assert "cancelled" in await refused(second_executor, workflow_id, PAUSE)


async def test_a_paused_run_can_be_cancelled(
    backends: Backends,
    server: ScriptedOpenAI,
    second_executor: executor_pb2_grpc.ExecutorServiceAsyncStub,
) -> None:
    script, gate = gated_script()
    workflow_id, owner = await start_on_first(backends, server, script)
    await held_at_work(backends, gate, workflow_id)
    await control(owner, workflow_id, PAUSE)
    gate.release.set()
    await wait_for(backends, workflow_id, "WORKFLOW_PAUSED")
    await control(second_executor, workflow_id, CANCEL)
    events = await backends.read_log(workflow_id)
    assert types_of(events)[-3:] == ["WORKFLOW_CANCELLING", "WORKFLOW_CANCELLED", "STREAM_END"]


class UntilInterrupted(AgentModel):
    """Keeps calling the calculator until it sees the user's interrupt, then answers."""

    def __call__(self, body: dict[str, Any]) -> Reply:
        if not body.get("stream") and any(
            str(m.get("content") or "").startswith("[USER INTERRUPT]") for m in body["messages"]
        ):
            self.steps = [answer("Noted: in words, four.")]
        return super().__call__(body)


async def test_an_interrupt_sent_to_another_replica_reaches_the_run(
    backends: Backends,
    server: ScriptedOpenAI,
    second_executor: executor_pb2_grpc.ExecutorServiceAsyncStub,
) -> None:
    script = UntilInterrupted(default=calc("2+2"))
    gate = Gate(threading.Event(), threading.Event())
    script.steps = [Step(calls=[("calculator", {"expression": "2+2"})], during=gate.during)]
    workflow_id, _ = await start_on_first(backends, server, script)
    await held_at_work(backends, gate, workflow_id)
    accepted = await second_executor.Interrupt(
        executor_pb2.InterruptRequest(workflow_id=workflow_id, tenant_id=TENANT, message="In words")
    )
    assert accepted.accepted
    gate.release.set()
    events = await backends.read_log(workflow_id)

    seen = [n for n in range(1, len(script.loop_calls) + 1) if "In words" in str(script.saw(n))]
    assert seen and seen == list(range(seen[0], len(script.loop_calls) + 1))
    assert first(events, "MESSAGE_RECEIVED")["payload"]["content"] == "In words"
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]


async def test_control_names_bad_requests(
    backends: Backends, second_executor: executor_pb2_grpc.ExecutorServiceAsyncStub
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await control(second_executor, "wf-does-not-exist", PAUSE)
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as no_action:
        await control(second_executor, "wf-x", executor_pb2.CONTROL_ACTION_UNSPECIFIED)
    assert no_action.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "PAUSE, RESUME or CANCEL" in (no_action.value.details() or "")


async def test_a_whole_run_streams_over_executor_run(
    backends: Backends, server: ScriptedOpenAI
) -> None:
    server.set_handler(AgentModel(calc("6*7"), answer("42"), synthesis="It is 42."))
    llm = OpenAIModel(server.base_url, "test-key", "scripted-model", 10.0, 0)
    stub, _ = await backends.serve(backends.run_manager(llm))
    events = [
        as_dict(e)
        async for e in stub.Run(executor_pb2.StartRunRequest(query="6*7?", tenant_id=TENANT))
    ]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert types_of(events)[0] == "WORKFLOW_STARTED"
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert first(events, "TOOL_OBSERVATION")["payload"]["result"] == "42"
    assert len(of_type(events, "THREAD_MESSAGE_DELTA")) == 3
    info = await stub.GetRun(
        executor_pb2.GetRunRequest(workflow_id=events[0]["workflow_id"], tenant_id=TENANT)
    )
    assert info.status == common_pb2.WORKFLOW_STATUS_COMPLETED and info.result == "It is 42."
