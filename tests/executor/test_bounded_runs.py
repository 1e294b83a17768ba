"""Every call bounded, every run bounded: the output cap on each request, replies cut off at
it, and the run deadline, against the scripted OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.executor.adapters.planner import PlannerClient
from services.executor.engine.progress import BREVITY_PROMPT
from services.planner.routing import ROUTER_PROMPT
from shuttle.llm.factory import build_registry
from shuttle.llm.openai_model import OpenAIModel
from shuttle.settings import Settings
from tests.executor.conftest import Backends, first, of_type, running_backends, types_of
from tests.support.scripted_openai import Reply, ScriptedOpenAI, error, text, tool_call

RAMBLING = "Let me think about this. " * 40


def openai_model(server: ScriptedOpenAI, retries: int = 0) -> OpenAIModel:
    return OpenAIModel(
        server.base_url, "test-key", "scripted-model", 10.0, retries, retry_base_seconds=0.001
    )


def cut_off(content: str = RAMBLING) -> Reply:
    return Reply(content=content, finish_reason="length")


def ends_cleanly(events: list[dict[str, Any]]) -> None:
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert types_of(events)[-3:] == ["AGENT_COMPLETED", "WORKFLOW_COMPLETED", "STREAM_END"]


def synthesis_draft(request: dict[str, Any]) -> str:
    prompt = str(request["messages"][-1]["content"])
    draft = prompt.split("Draft answer from the agent:\n", 1)[1]
    return draft.rsplit("\n\nWrite the final answer.", 1)[0]


async def test_a_configured_endpoint_sends_the_default_output_cap_with_every_call(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(text("84."), text("The answer is 84."))
    registry = build_registry(Settings(openai_base_url=model.base_url, model="scripted-model"))
    try:
        events = await backends.run_to_end(backends.run_manager(registry.default), "12*7?")
    finally:
        await registry.close()

    ends_cleanly(events)
    assert len(model.requests) == 2  # the loop's call and the streamed answer
    cap = Settings().llm_max_output_tokens
    assert [r.get("max_tokens") for r in model.requests] == [cap, cap]


async def test_a_reply_cut_off_is_not_the_answer_and_the_model_is_asked_to_be_brief(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(cut_off(), text("84."), text("The answer is 84."))
    events = await backends.run_to_end(backends.run_manager(openai_model(model)), "12*7?")

    ends_cleanly(events)
    nudges = [e for e in of_type(events, "STATUS_UPDATE") if e["payload"].get("kind")]
    assert [e["payload"]["kind"] for e in nudges] == ["brevity_request"]
    second = model.requests[1]["messages"]
    assert second[-1] == {"role": "user", "content": BREVITY_PROMPT}
    assert all(m.get("content") != RAMBLING for m in second)
    assert synthesis_draft(model.requests[2]) == "84."
    assert first(events, "AGENT_COMPLETED")["payload"]["result"] == "The answer is 84."


async def test_a_reply_cut_off_twice_ends_in_the_fallback_answer(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(cut_off(), cut_off("Again " * 50), text("I could not work it out."))
    events = await backends.run_to_end(backends.run_manager(openai_model(model)), "12*7?")

    ends_cleanly(events)
    assert len(model.requests) == 3
    draft = synthesis_draft(model.requests[2])
    assert "Let me think" not in draft and "Again" not in draft
    assert draft.startswith("I could not reach an answer")


async def test_a_slow_model_meets_the_run_deadline_and_the_run_still_answers(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    def slow_loop_quick_answer(body: dict[str, Any]) -> Reply:
        if body.get("stream"):
            return text("What I have so far: nothing certain.")
        return Reply(content="84.", delay=4)  # past the deadline

    model.set_handler(slow_loop_quick_answer)
    runs = backends.run_manager(openai_model(model, retries=2), run_timeout_seconds=1.0)
    events = await backends.run_to_end(runs, "12*7?")

    ends_cleanly(events)
    timeout = next(e for e in events if e["payload"].get("error_type") == "TIMEOUT")
    assert timeout["type"] == "ERROR_OCCURRED"
    assert timeout["payload"]["fatal"] is False
    assert timeout["payload"]["timeout_seconds"] == 1.0
    answer = first(events, "THREAD_MESSAGE_COMPLETED")["payload"]["content"]
    assert answer == "What I have so far: nothing certain."
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"] == answer
    assert not any(e["payload"].get("fatal") for e in of_type(events, "ERROR_OCCURRED"))


async def test_no_retry_is_made_or_promised_past_the_run_deadline(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    def overloaded_loop(body: dict[str, Any]) -> Reply:
        if body.get("stream"):
            return text("Nothing could be computed in time.")
        return error(503, "overloaded", headers={"retry-after": "30"})

    model.set_handler(overloaded_loop)
    runs = backends.run_manager(openai_model(model, retries=5), run_timeout_seconds=2.0)
    events = await backends.run_to_end(runs, "12*7?")

    ends_cleanly(events)
    loop_calls = [r for r in model.requests if not r.get("stream")]
    assert len(loop_calls) == 1
    errors = [e["payload"] for e in of_type(events, "ERROR_OCCURRED")]
    assert [p["error_type"] for p in errors] == ["TIMEOUT"]
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"] == (
        "Nothing could be computed in time."
    )


async def test_routing_counts_against_the_run_deadline(
    tmp_path: Path, model: ScriptedOpenAI
) -> None:
    def slow_router(body: dict[str, Any]) -> Reply:
        if body["messages"][0]["content"] == ROUTER_PROMPT:
            # Late: had the run waited for it, the run would be COMPLEX.
            route = {"mode": "COMPLEX", "estimated_complexity": 0.9}
            return Reply(tool_calls=tool_call("route_task", route).tool_calls, delay=8)
        if body.get("stream"):
            return text("No time to look it up.")
        return text("Paris.")

    model.set_handler(slow_router)
    async with running_backends(tmp_path, model.base_url) as backends:
        # A router that would wait far longer than the run may take.
        router = PlannerClient(backends.channels[2], route_timeout_seconds=300)
        runs = backends.run_manager(openai_model(model), router=router, run_timeout_seconds=1.0)
        events = await backends.run_to_end(runs, "Name the capital of France")

    ends_cleanly(events)
    assert any(r["messages"][0]["content"] == ROUTER_PROMPT for r in model.requests)
    assert first(events, "WORKFLOW_STARTED")["payload"]["mode"] == "STANDARD"
    errors = [e["payload"]["error_type"] for e in of_type(events, "ERROR_OCCURRED")]
    assert errors == ["TIMEOUT"]
