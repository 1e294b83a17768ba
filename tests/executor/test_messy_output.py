"""What real small models send, understood rather than fatal: almost-JSON actions, tool
calls written as text, malformed arguments, empty replies and syntheses that say nothing or
only repeat their prompt."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from services.executor.engine.json_actions import parse_action, text_tool_calls
from services.executor.engine.json_actions import system_prompt as json_system_prompt
from services.executor.engine.modes import NATIVE_SYSTEM_PROMPT
from services.executor.engine.progress import ECHOED_PROMPT, EMPTY_REPLY_PROMPT
from services.executor.engine.synthesis import echoes_prompt, fallback_answer
from services.executor.runs import RunManager
from shuttle.llm.openai_model import OpenAIModel
from tests.executor.conftest import Backends, first, of_type
from tests.support.agent_model import AgentModel, answer, calc, raw
from tests.support.scripted_openai import Reply, ScriptedOpenAI, text

QUIET: dict[str, Any] = {"completion_check": False, "reflection_interval": 0, "cycle_threshold": 0}


@pytest.fixture
def server() -> Iterator[ScriptedOpenAI]:
    started = ScriptedOpenAI().start()
    yield started
    started.stop()


def manager(backends: Backends, server: ScriptedOpenAI, script: Any, native: bool) -> RunManager:
    server.set_handler(script)
    llm = OpenAIModel(server.base_url, "test-key", "scripted-model", 10.0, 0)
    return backends.run_manager(llm, use_native_tools=native, **QUIET)


@pytest.mark.parametrize(
    "reply",
    [
        '```json\n{"type": "tool_call", "tool_name": "calculator", '
        '"tool_args": {"expression": "6*7"},}\n```',
        '{"type": "tool_call", "tool_name": "calculator", '
        '"tool_args": "{\\"expression\\": \\"6*7\\"}"}',
        '{"type": "tool_call", "tool_name": "calculator", "arguments": {"expression": "6*7"}}',
        "{'type': 'tool_call', 'tool_name': 'calculator', 'tool_args': {'expression': '6*7'}}",
        'Sure. {"tool_name": "calculator", "tool_args": {"expression": "6*7"}',
    ],
    ids=["fenced-trailing-commas", "args-as-string", "arguments-key", "single-quotes", "unclosed"],
)
def test_almost_json_actions_are_mended(reply: str) -> None:
    action = parse_action(reply)
    assert action is not None and action.type == "tool_call"
    assert (action.tool_name, json.loads(action.arguments_json)) == (
        "calculator",
        {"expression": "6*7"},
    )


def test_calls_written_as_text_are_calls_of_offered_tools_only() -> None:
    offered = {"calculator"}
    hermes = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>'
    assert text_tool_calls(hermes, offered) == [("calculator", '{"expression":"2+2"}')]
    two = hermes + '\n<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"3\\"}"}'
    assert [name for name, _ in text_tool_calls(two, offered)] == ["calculator", "calculator"]
    lone = '{"name": "calculator", "parameters": {"expression": "5*5"}}'
    assert text_tool_calls(lone, offered) == [("calculator", '{"expression":"5*5"}')]
    assert text_tool_calls('{"name": "rm_rf", "arguments": {}}', offered) == []
    assert text_tool_calls('The JSON {"name": "calculator"} is an example.', offered) == []


async def test_a_native_model_that_writes_its_call_as_text_gets_it_run(
    backends: Backends, server: ScriptedOpenAI
) -> None:
    written = '<tool_call>{"name": "calculator", "arguments": {"expression": "12*7"}}</tool_call>'
    script = AgentModel(raw(written), answer("It is 84."), synthesis="84")
    events = await backends.run_to_end(manager(backends, server, script, True), "12*7?")
    assert first(events, "TOOL_OBSERVATION")["payload"]["result"] == "84"
    replayed = script.saw(2)[-2]
    assert replayed["role"] == "assistant" and replayed["content"] is None
    assert replayed["tool_calls"][0]["function"] == {
        "name": "calculator",
        "arguments": '{"expression":"12*7"}',
    }


def broken_arguments(body: dict[str, Any]) -> Reply:
    """A native call whose arguments are cut-off JSON, then an answer."""
    if body.get("stream"):
        return text("Done.")
    if len([m for m in body["messages"] if m["role"] == "tool"]) == 0:
        return Reply(tool_calls=[("c1", "calculator", '{"expression": "1+')])
    return text("I could not compute it.")


async def test_malformed_native_arguments_are_an_error_and_replay_as_valid_json(
    backends: Backends, server: ScriptedOpenAI
) -> None:
    events = await backends.run_to_end(manager(backends, server, broken_arguments, True), "1+?")
    observation = first(events, "TOOL_OBSERVATION")["payload"]
    assert observation["error"]
    second_call = server.requests[-2]  # the loop's second call, before the synthesis
    [assistant] = [m for m in second_call["messages"] if m.get("tool_calls")]
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"
    assert of_type(events, "WORKFLOW_COMPLETED")


@pytest.mark.parametrize("native", [True, False], ids=["native", "json"])
async def test_an_empty_reply_gets_one_nudge_and_never_becomes_the_answer(
    backends: Backends, server: ScriptedOpenAI, native: bool
) -> None:
    nudged = AgentModel(raw(""), answer("It is 4."), synthesis="2+2 = 4")
    events = await backends.run_to_end(manager(backends, server, nudged, native), "2+2?")
    kinds = [e["payload"].get("kind") for e in of_type(events, "STATUS_UPDATE")]
    if native:
        assert "empty_reply" in kinds
        assert nudged.saw(2)[-1] == {"role": "user", "content": EMPTY_REPLY_PROMPT}
    assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"] == "2+2 = 4"
    silent = AgentModel(calc("2+2"), raw(""), raw(""), raw(""), synthesis="")
    events = await backends.run_to_end(manager(backends, server, silent, native), "2+2?")
    result = first(events, "WORKFLOW_COMPLETED")["payload"]["result"]
    assert result.strip() and "calculator" in result


@pytest.mark.parametrize("native", [True, False], ids=["native", "json"])
async def test_a_reply_that_gives_the_instructions_back_is_nudged_never_the_answer(
    backends: Backends, server: ScriptedOpenAI, native: bool
) -> None:
    # Gemma 3 270M (base) answered with its system prompt.
    echo = (NATIVE_SYSTEM_PROMPT if native else json_system_prompt([])).split("\n")[0]
    script = AgentModel(answer(echo), answer(echo), synthesis="")
    events = await backends.run_to_end(manager(backends, server, script, native), "2+2?")
    kinds = [e["payload"].get("kind") for e in of_type(events, "STATUS_UPDATE")]
    assert kinds.count("echoed_prompt") == 1
    assert script.saw(2)[-1] == {"role": "user", "content": ECHOED_PROMPT}
    result = first(events, "WORKFLOW_COMPLETED")["payload"]["result"]
    assert result == fallback_answer([])


async def test_a_synthesis_that_says_nothing_or_echoes_its_prompt_is_not_the_answer(
    backends: Backends, server: ScriptedOpenAI
) -> None:
    for synthesis in (
        "",
        "Question: 12*7?\n\nSteps taken:\n1. calculator\n\nDraft answer from the agent:\n84",
        # Gemma 3 270M, asked for the answer, gave its instructions back:
        "you write the final answer to a user's question from the work an agent has done.",
    ):
        script = AgentModel(calc("12*7"), answer("It is 84."), synthesis=synthesis)
        events = await backends.run_to_end(manager(backends, server, script, True), "12*7?")
        assert first(events, "WORKFLOW_COMPLETED")["payload"]["result"] == "It is 84.", synthesis
        assert first(events, "THREAD_MESSAGE_COMPLETED")["payload"]["content"] == "It is 84."


@pytest.mark.parametrize(
    "reply",
    ["The capital of France is Paris.", "84", "The final answer to the question is 84."],
)
def test_an_answer_that_quotes_its_instructions_is_still_an_answer(reply: str) -> None:
    assert not echoes_prompt(reply)
