"""User interrupts over ExecutorService.Interrupt: when each mode takes them, how several
are merged, and how a pending final answer gives way to them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from services.executor.runs import RunManager
from shuttle.llm.openai_model import OpenAIModel
from shuttle.v1 import common_pb2, executor_pb2, executor_pb2_grpc
from tests.executor.conftest import TENANT, Backends, agent_defaults, first, of_type
from tests.executor.test_engine_modes import window_for
from tests.support.agent_model import AgentModel, Step, answer, calc
from tests.support.scripted_openai import ScriptedOpenAI

DEFAULTS = agent_defaults()


@pytest.fixture(params=["native", "json"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server() -> Iterator[ScriptedOpenAI]:
    started = ScriptedOpenAI().start()
    yield started
    started.stop()


class Interrupter:
    """Sends Interrupt RPCs from the model's thread while the model "thinks"."""

    def __init__(self, port: int) -> None:
        self._channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self._stub = executor_pb2_grpc.ExecutorServiceStub(self._channel)
        self.workflow_id = ""
        self._known = threading.Event()

    def set_workflow(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        self._known.set()

    def send(self, *messages: str) -> Callable[[], None]:
        def during() -> None:
            assert self._known.wait(10)
            for message in messages:
                self._stub.Interrupt(
                    executor_pb2.InterruptRequest(
                        workflow_id=self.workflow_id, tenant_id=TENANT, message=message
                    )
                )

        return during

    def close(self) -> None:
        self._channel.close()


async def run_with_interrupts(
    backends: Backends,
    server: ScriptedOpenAI,
    mode: str,
    build: Callable[[Interrupter], AgentModel],
) -> tuple[AgentModel, list[dict[str, Any]]]:
    llm = OpenAIModel(server.base_url, "test-key", "scripted-model", 10.0, 0)
    runs: RunManager = backends.run_manager(
        llm, use_native_tools=mode == "native", completion_check=False
    )
    stub, port = await backends.serve(runs)
    interrupter = Interrupter(port)
    script = build(interrupter)
    server.set_handler(script)
    try:
        started = await stub.StartRun(
            executor_pb2.StartRunRequest(query="What is 2+2?", tenant_id=TENANT)
        )
        interrupter.set_workflow(started.workflow_id)
        events = await backends.read_log(started.workflow_id)
    finally:
        interrupter.close()
    return script, events


async def test_each_mode_takes_interrupts_where_its_protocol_allows(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    def build(interrupter: Interrupter) -> AgentModel:
        step = calc("2+2")
        step.during = interrupter.send("Also give the answer in words.")
        return AgentModel(step, answer("4, four"))

    script, events = await run_with_interrupts(backends, server, mode, build)

    after = script.saw(2)
    interrupt = {
        "role": "user",
        "content": "[USER INTERRUPT] The user added, while you were working: "
        "Also give the answer in words.",
    }
    if mode == "native":
        # Only after the tool results: nothing may come between tool_calls and their results.
        assert [m["role"] for m in after[-3:]] == ["assistant", "tool", "user"]
        assert after[-1] == interrupt
    else:
        # Right after the assistant message, before the observation.
        assert [m["role"] for m in after[-3:]] == ["assistant", "user", "user"]
        assert after[-2] == interrupt and after[-1]["content"].startswith("Observation")
    received = first(events, "MESSAGE_RECEIVED")
    assert received["payload"]["from"] == "user"
    assert received["payload"]["content"] == "Also give the answer in words."
    injected = [e for e in of_type(events, "STATUS_UPDATE") if e["payload"]["kind"] == "interrupt"]
    assert len(injected) == 1 and received["seq"] < injected[0]["seq"]


async def test_several_interrupts_merge_and_a_pending_answer_waits_for_them(
    backends: Backends, server: ScriptedOpenAI, mode: str
) -> None:
    def build(interrupter: Interrupter) -> AgentModel:
        early = Step(answer="4.", during=interrupter.send("Show your work.", "And use French."))
        return AgentModel(early, answer("2+2 = 4 : quatre."), synthesis="Quatre.")

    script, events = await run_with_interrupts(backends, server, mode, build)

    assert len(script.loop_calls) == 2
    after = script.saw(2)
    assert "4." in after[-2]["content"] and after[-2]["role"] == "assistant"
    merged = after[-1]["content"]
    assert merged.startswith("[USER INTERRUPT]")
    assert "1. Show your work.\n2. And use French." in merged
    assert sum(m["content"].startswith("[USER INTERRUPT]") for m in after if m["content"]) == 1
    assert len(of_type(events, "MESSAGE_RECEIVED")) == 2
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"] == "Quatre."


async def test_an_interrupt_is_pinned_through_compaction(
    backends: Backends, server: ScriptedOpenAI
) -> None:
    def build(interrupter: Interrupter) -> AgentModel:
        steps = [calc(f"7**{1000 - i}") for i in range(6)]
        steps[0].during = interrupter.send("Keep the last digit of each.")
        return AgentModel(*steps, answer("Done."))

    llm = OpenAIModel(server.base_url, "test-key", "scripted-model", 10.0, 0)
    window = await window_for(backends, "native", "Powers", room=900)
    runs = backends.run_manager(
        llm, completion_check=False, context_tokens=window, compact_keep_recent=2
    )
    stub, port = await backends.serve(runs)
    interrupter = Interrupter(port)
    script = build(interrupter)
    server.set_handler(script)
    started = await stub.StartRun(executor_pb2.StartRunRequest(query="Powers", tenant_id=TENANT))
    interrupter.set_workflow(started.workflow_id)
    events = await backends.read_log(started.workflow_id)
    interrupter.close()

    assert of_type(events, "WORKSPACE_UPDATED")
    for n in range(2, len(script.loop_calls) + 1):
        assert any("Keep the last digit" in str(m["content"]) for m in script.saw(n))


async def test_interrupts_need_a_message_and_a_live_workflow(
    backends: Backends, server: ScriptedOpenAI
) -> None:
    server.set_handler(AgentModel(answer("Hi.")))
    llm = OpenAIModel(server.base_url, "test-key", "scripted-model", 10.0, 0)
    stub, _ = await backends.serve(backends.run_manager(llm))
    started = await stub.StartRun(executor_pb2.StartRunRequest(query="Hi", tenant_id=TENANT))
    await backends.read_log(started.workflow_id)

    with pytest.raises(grpc.aio.AioRpcError) as empty:
        await stub.Interrupt(
            executor_pb2.InterruptRequest(
                workflow_id=started.workflow_id, tenant_id=TENANT, message="  "
            )
        )
    assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as finished:
        await stub.Interrupt(
            executor_pb2.InterruptRequest(
                workflow_id=started.workflow_id, tenant_id=TENANT, message="more?"
            )
        )
    assert finished.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "completed" in (finished.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as other_tenant:
        await stub.Interrupt(
            executor_pb2.InterruptRequest(
                workflow_id=started.workflow_id, tenant_id="tenant-b", message="hello"
            )
        )
    assert other_tenant.value.code() == grpc.StatusCode.NOT_FOUND
    workflow = await backends.workflow(started.workflow_id)
    assert workflow.status == common_pb2.WORKFLOW_STATUS_COMPLETED


async def test_follow_ups_reach_the_answer_synthesis(
    backends: Backends, server: ScriptedOpenAI
) -> None:
    def build(interrupter: Interrupter) -> AgentModel:
        early = Step(answer="4.", during=interrupter.send("Answer in French."))
        return AgentModel(early, answer("2+2 = 4"), synthesis="Quatre.")

    script, events = await run_with_interrupts(backends, server, "native", build)

    [synthesis] = script.synthesis_calls
    assert "Answer in French." in synthesis["messages"][-1]["content"]
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"] == "Quatre."


class LateInterrupts(AgentModel):
    """A model whose first answer synthesis meets a follow-up sent while it writes."""

    def __init__(self, interrupter: Interrupter) -> None:
        super().__init__(answer("4"), synthesis="Four.")
        self._send = interrupter.send("Now say it in French.")

    def __call__(self, body: dict[str, Any]) -> Any:
        if body.get("stream"):
            if not self.synthesis_calls:
                self._send()
            else:
                self.synthesis = "Quatre."
        return super().__call__(body)


async def test_a_follow_up_sent_during_the_synthesis_is_answered(
    backends: Backends, server: ScriptedOpenAI
) -> None:
    script, events = await run_with_interrupts(backends, server, "native", LateInterrupts)

    assert len(script.synthesis_calls) == 2
    assert "Now say it in French." in script.synthesis_calls[1]["messages"][-1]["content"]
    kinds = [e["payload"].get("kind") for e in of_type(events, "STATUS_UPDATE")]
    assert kinds[-2:] == ["interrupt", "answer_restarted"]
    completed = [e["payload"]["content"] for e in of_type(events, "THREAD_MESSAGE_COMPLETED")]
    assert completed == ["Four.", "Quatre."]
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"] == "Quatre."
