"""A run in a session: earlier turns reach the model before the query, through the real
ExecutorService, and a long session is compacted with the latest turn kept verbatim."""

from __future__ import annotations

import pytest

from shuttle.llm.openai_model import OpenAIModel
from shuttle.v1 import common_pb2, executor_pb2
from tests.executor.conftest import TENANT, Backends, first
from tests.support.scripted_openai import ScriptedOpenAI, text

pytestmark = pytest.mark.integration


def llm_for(model: ScriptedOpenAI) -> OpenAIModel:
    return OpenAIModel(model.base_url, "test-key", "scripted-model", 10.0, 0)


def turn(user: str, answer: str) -> list[common_pb2.ChatMessage]:
    return [
        common_pb2.ChatMessage(role="user", content=user),
        common_pb2.ChatMessage(role="assistant", content=answer),
    ]


async def test_the_model_sees_the_earlier_turns_before_the_follow_up(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    executor, _ = await backends.serve(backends.run_manager(llm_for(model)))
    model.script(text("Berlin: 12°C, cloudy."), text("In Berlin it is 12°C and cloudy."))
    started = await executor.StartRun(
        executor_pb2.StartRunRequest(
            query="Now do the same for Berlin.",
            tenant_id=TENANT,
            session_id="sess-weather",
            history=turn("What is the weather in Paris?", "Paris: 18°C, sunny."),
        )
    )
    log = await backends.read_log(started.workflow_id)
    assert first(log, "WORKFLOW_STARTED")["payload"]["session_id"] == "sess-weather"
    loop_call, synthesis = model.requests
    roles_and_text = [(m["role"], m.get("content")) for m in loop_call["messages"][1:]]
    assert roles_and_text == [
        ("user", "What is the weather in Paris?"),
        ("assistant", "Paris: 18°C, sunny."),
        ("user", "Now do the same for Berlin."),
    ]
    # The answer is written knowing what "the same" refers to.
    assert "What is the weather in Paris?" in synthesis["messages"][-1]["content"]


async def test_history_with_a_role_other_than_user_or_assistant_is_refused(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    import grpc

    executor, _ = await backends.serve(backends.run_manager(llm_for(model)))
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await executor.StartRun(
            executor_pb2.StartRunRequest(
                query="next",
                tenant_id=TENANT,
                history=[common_pb2.ChatMessage(role="tool", content="x")],
            )
        )
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "history[0].role" in (failure.value.details() or "")
    assert model.requests == []


async def test_a_long_session_is_compacted_keeping_the_latest_turn(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    # A window that ten long turns overflow, but the summary and the latest turn fit.
    runs = backends.run_manager(
        llm_for(model), context_tokens=2_000, context_ratio=1.0, compact_keep_recent=1
    )
    executor, _ = await backends.serve(runs)
    history: list[common_pb2.ChatMessage] = []
    for n in range(10):
        history += turn(f"Question {n}: " + "tell me more " * 60, f"Answer {n}: " + "detail " * 60)
    latest_user, latest_answer = history[-2].content, history[-1].content
    model.script(
        text("Turns 0-8 asked for more detail; each answer gave it."),
        text("Done."),
        text("Done."),
    )
    started = await executor.StartRun(
        executor_pb2.StartRunRequest(query="Summarise it all.", tenant_id=TENANT, history=history)
    )
    log = await backends.read_log(started.workflow_id)
    compact = first(log, "WORKSPACE_UPDATED")["payload"]
    assert compact["kind"] == "compact" and compact["method"] == "summary"
    summary_call, loop_call = model.requests[0], model.requests[1]
    transcript = summary_call["messages"][-1]["content"]
    assert "Question 0:" in transcript and "Answer 8:" in transcript
    assert "Question 9:" not in transcript
    sent = [(m["role"], m["content"]) for m in loop_call["messages"][1:]]
    assert sent[0][1].startswith("[Summary of earlier steps]")
    assert ("user", latest_user) in sent and ("assistant", latest_answer) in sent
    assert sent[-1] == ("user", "Summarise it all.")
    assert not any("Question 0:" in content for _, content in sent)
