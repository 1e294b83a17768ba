"""Servers that lack a feature: an endpoint that refuses `tools` gets JSON actions from the
same step on (and for the rest of the process); a context overflow is compacted away and the
call made again. The run's log says so, and replays."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from services.executor.engine.json_actions import JSON_SYSTEM_PROMPT
from services.executor.engine.state import Stage
from services.executor.policies.context_guard import COMPACT_PROMPT
from shuttle.llm.openai_model import OpenAIModel
from tests.executor.conftest import Backends, agent_defaults, first, of_type, types_of
from tests.executor.live_runs import LiveAgent, folded, recorded
from tests.support.agent_model import AgentModel, answer, calc
from tests.support.scripted_openai import Handler, Reply, ScriptedOpenAI, error

JSON_PROMPT_OPENING = JSON_SYSTEM_PROMPT.split("{tools}")[0]
QUIET: dict[str, Any] = {"completion_check": False, "reflection_interval": 0, "cycle_threshold": 0}


def refusing_tools(script: Handler, message: str) -> Handler:
    """An endpoint that refuses any request carrying `tools`, as llama.cpp without --jinja."""

    def handle(body: dict[str, Any]) -> Reply:
        if "tools" in body:
            return error(500, message)
        return script(body)

    return handle


async def test_a_server_refusing_tools_gets_json_actions_and_the_run_finishes(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    script = AgentModel(calc("12*7"), answer("84."), synthesis="12*7 is 84.")
    model.set_handler(refusing_tools(script, "tools param requires --jinja flag"))
    llm = OpenAIModel(model.base_url, "k", "scripted-model", 10.0, 2, retry_base_seconds=0.001)
    runs = backends.run_manager(llm, **QUIET)
    events = await backends.run_to_end(runs, "What is 12*7?")

    assert types_of(events)[-3:] == ["AGENT_COMPLETED", "WORKFLOW_COMPLETED", "STREAM_END"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    recovery = first(events, "ERROR_RECOVERY")["payload"]
    assert recovery | {"error_message": "", "model": ""} == {
        "error_type": "FEATURE_UNSUPPORTED",
        "recovery_action": "json_mode",
        "feature": "tools",
        "error_message": "",
        "success": True,
        "model": "",
    }
    assert not of_type(events, "ERROR_OCCURRED")  # a refusal is not retried
    refused, *json_calls = [r for r in model.requests if not r.get("stream")]
    assert "tools" in refused and len(json_calls) == 2
    for request in json_calls:
        assert "tools" not in request
        assert request["messages"][0]["content"].startswith(JSON_PROMPT_OPENING)
    assert first(events, "TOOL_OBSERVATION")["payload"]["result"] == "84"
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"] == "12*7 is 84."

    # The endpoint is remembered: the next run starts in JSON mode and offers no tools.
    model.requests.clear()
    script.steps = [answer("2.")]
    again = await backends.run_to_end(runs, "What is 1+1?")
    assert first(again, "AGENT_STARTED")["payload"]["tool_mode"] == "json"
    assert not of_type(again, "ERROR_RECOVERY")
    assert all("tools" not in r for r in model.requests)


async def test_the_switch_to_json_actions_replays_from_the_log(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    settings = replace(agent_defaults(), tool_timeout_seconds=10, **QUIET)
    run = LiveAgent(backends, settings, "What is 12*7?")
    script = AgentModel(calc("12*7"), answer("84."), synthesis="It is 84.")
    message = "registry.ollama.ai/library/gemma3:270m does not support tools"
    final = await run.run(model, refusing_tools(script, message))

    assert final.stage is Stage.DONE and not final.native
    assert final.answer == "It is 84." and len(final.steps) == 1
    events = await recorded(backends, run.workflow_id)
    recovery = await folded(backends, events, run.settings, run.ctx)
    assert recovery.agent is not None
    assert recovery.agent.state == final
    switched = next(e for e in events if e.type == "ERROR_RECOVERY")
    upto = await folded(backends, [e for e in events if e.seq <= switched.seq], settings, run.ctx)
    assert upto.agent is not None and not upto.agent.state.native
    assert upto.agent.state.conversation.messages[0]["content"].startswith(JSON_PROMPT_OPENING)


def overflowing_once(script: AgentModel, at_call: int) -> Handler:
    """llama.cpp's overflow answer to the `at_call`th loop call, then the script's replies."""
    calls = 0

    def handle(body: dict[str, Any]) -> Reply:
        nonlocal calls
        loop_call = not body.get("stream") and not is_summary(body)
        calls += loop_call
        if loop_call and calls == at_call:
            return error(400, "the request exceeds the available context size, try increasing it")
        return script(body)

    return handle


def is_summary(body: dict[str, Any]) -> bool:
    return str(body["messages"][0].get("content", "")).startswith(COMPACT_PROMPT)


async def test_a_context_overflow_compacts_and_calls_again(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    settings = replace(agent_defaults(), tool_timeout_seconds=10, compact_keep_recent=2, **QUIET)
    run = LiveAgent(backends, settings, "Add them up")
    script = AgentModel(
        calc("1+2"), calc("3+4"), calc("5+6"), answer("3, 7 and 11."), synthesis="3, 7, 11."
    )
    final = await run.run(model, overflowing_once(script, at_call=4))

    assert final.stage is Stage.DONE and final.answer == "3, 7, 11."
    events = await recorded(backends, run.workflow_id)
    kinds = [e.type for e in events]
    assert "ERROR_OCCURRED" not in kinds
    assert len(script.summary_calls) == 1
    compacted = next(e for e in events if e.type == "WORKSPACE_UPDATED")
    assert compacted.get("kept_messages") < compacted.get("original_messages")
    loop_requests = [r for r in model.requests if not r.get("stream") and not is_summary(r)]
    refused, retried = loop_requests[3]["messages"], loop_requests[4]["messages"]
    assert len(retried) < len(refused)
    assert retried[1]["content"] == "Add them up"  # the query is pinned
    # The compaction came between the call's AGENT_THINKING{start} and its LLM_OUTPUT.
    starts = [i for i, e in enumerate(events) if e.type == "AGENT_THINKING"]
    assert starts[-2] < kinds.index("WORKSPACE_UPDATED")
    recovery = await folded(backends, events, run.settings, run.ctx)
    assert recovery.agent is not None and recovery.agent.state == final
