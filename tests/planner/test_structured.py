"""structured_llm_call: every path of the degradation chain, with exact call counts."""

from __future__ import annotations

import re
from typing import Any

import pytest

from services.planner.structured import (
    StructuredLevel,
    StructuredOutputError,
    structured_llm_call,
)
from shuttle.llm.protocol import ContextOverflowError
from tests.planner.conftest import llm_with
from tests.support.scripted_openai import Reply, ScriptedOpenAI, error, text, tool_call

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city", "days"],
}
ASK = [{"role": "system", "content": "You plan trips."}, {"role": "user", "content": "Kyoto"}]
GOOD = {"city": "Kyoto", "days": 3}
GARBAGE = text("I am not able to produce that.")


def kinds(server: ScriptedOpenAI) -> list[str]:
    """What each request asked for: native, json or plain."""
    out = []
    for body in server.requests:
        if "tools" in body:
            out.append("native")
        elif body.get("response_format") == {"type": "json_object"}:
            out.append("json")
        else:
            out.append("plain")
    return out


@pytest.mark.parametrize(
    ("tool_call_ability", "json_mode", "path"),
    [
        (True, True, ["native", "json", "json", "plain", "plain"]),
        (False, True, ["json", "json", "plain", "plain"]),
        (True, False, ["native", "plain", "plain"]),
        (False, False, ["plain", "plain"]),
    ],
)
async def test_the_worst_case_walks_every_level_the_model_supports(
    server: ScriptedOpenAI, tool_call_ability: bool, json_mode: bool, path: list[str]
) -> None:
    server.set_handler(lambda body: GARBAGE)
    llm = llm_with(server, tool_call=tool_call_ability, json_mode=json_mode)
    with pytest.raises(StructuredOutputError) as failure:
        await structured_llm_call(llm, ASK, SCHEMA)
    assert kinds(server) == path
    assert failure.value.attempts == len(path)
    assert failure.value.usage.output_tokens == 7 * len(path)
    assert f"after {len(path)} call(s)" in str(failure.value)


async def test_with_a_default_the_same_walk_returns_it(server: ScriptedOpenAI) -> None:
    server.set_handler(lambda body: GARBAGE)
    result = await structured_llm_call(
        llm_with(server, tool_call=True, json_mode=True), ASK, SCHEMA, default={"city": "?"}
    )
    assert result.value == {"city": "?"} and result.raw is None
    assert result.level is StructuredLevel.DEFAULT and result.attempts == 5


async def test_level_1_forces_the_function_and_takes_its_arguments(
    server: ScriptedOpenAI,
) -> None:
    server.script(tool_call("plan_trip", GOOD))
    result = await structured_llm_call(
        llm_with(server, tool_call=True, json_mode=True), ASK, SCHEMA, schema_name="plan_trip"
    )
    assert (result.value, result.level, result.attempts) == (GOOD, 1, 1)
    sent = server.requests[0]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "plan_trip"}}
    assert sent["tools"][0]["function"]["parameters"] == SCHEMA
    assert sent["messages"] == ASK


async def test_without_tool_choice_level_1_asks_for_the_call_in_words(
    server: ScriptedOpenAI,
) -> None:
    server.script(tool_call("respond", GOOD))
    llm = llm_with(server, tool_call=True, json_mode=False, tool_choice=False)
    result = await structured_llm_call(llm, ASK, SCHEMA)
    assert result.level is StructuredLevel.NATIVE_TOOL_CALL
    assert "tool_choice" not in server.requests[0]
    assert server.requests[0]["messages"][-1]["content"] == "Call `respond` now."


@pytest.mark.parametrize(
    "level_1_reply",
    [
        GARBAGE,  # no tool call at all
        tool_call("respond", {"city": "Kyoto"}),  # misses a required field
        tool_call("respond", {"city": "Kyoto", "days": 0}),  # breaks a constraint
        error(400, "tool_choice is not supported by this model"),  # the provider refuses
    ],
)
async def test_a_level_1_failure_falls_through_to_json_mode(
    server: ScriptedOpenAI, level_1_reply: Reply
) -> None:
    server.script(level_1_reply, text('{"city": "Kyoto", "days": 3}'))
    result = await structured_llm_call(
        llm_with(server, tool_call=True, json_mode=True), ASK, SCHEMA
    )
    assert (result.value, result.level, result.attempts) == (GOOD, 2, 2)
    assert kinds(server) == ["native", "json"]
    # The schema instruction is added to the caller's system prompt, not as a new message.
    json_call = server.requests[1]["messages"]
    assert len(json_call) == 2 and json_call[0]["content"].startswith("You plan trips.")
    assert '"required": ["city", "days"]' in json_call[0]["content"]


async def test_json_mode_retries_once_with_a_reformat_prompt(server: ScriptedOpenAI) -> None:
    server.script(text('{"city": "Kyoto"}'), text('{"city": "Kyoto", "days": 3}'))
    result = await structured_llm_call(
        llm_with(server, tool_call=False, json_mode=True), ASK, SCHEMA
    )
    assert (result.level, result.attempts) == (StructuredLevel.JSON_MODE, 2)
    retry = server.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": '{"city": "Kyoto"}'}
    assert retry[-1]["role"] == "user"
    assert "could not be used" in retry[-1]["content"]
    assert "'days' is a required property" in retry[-1]["content"]


async def test_json_mode_failing_twice_falls_through_to_plain_text(
    server: ScriptedOpenAI,
) -> None:
    server.script(
        GARBAGE,
        GARBAGE,
        text('Here you go:\n```json\n{"city": "Kyoto", "days": 3,}\n```\nEnjoy!'),
    )
    result = await structured_llm_call(
        llm_with(server, tool_call=False, json_mode=True), ASK, SCHEMA
    )
    assert (result.value, result.level, result.attempts) == (GOOD, 3, 3)
    assert kinds(server) == ["json", "json", "plain"]


async def test_plain_text_retry_succeeds_on_the_second_call(server: ScriptedOpenAI) -> None:
    server.script(GARBAGE, text("Sure. {'city': 'Kyoto', 'days': 3} is my answer."))
    result = await structured_llm_call(
        llm_with(server, tool_call=False, json_mode=False), ASK, SCHEMA
    )
    assert (result.value, result.level, result.attempts) == (GOOD, 3, 2)
    assert result.usage.output_tokens == 14


async def test_the_regex_fallback_reads_what_json_extraction_cannot(
    server: ScriptedOpenAI,
) -> None:
    server.script(text("City: Kyoto, for 3 days."))

    def fallback(reply: str) -> dict[str, Any] | None:
        found = re.search(r"City: (\w+), for (\d+) days", reply)
        return {"city": found.group(1), "days": int(found.group(2))} if found else None

    result = await structured_llm_call(
        llm_with(server, tool_call=False, json_mode=False), ASK, SCHEMA, regex_fallback=fallback
    )
    assert (result.value, result.level, result.attempts) == (GOOD, 3, 1)


async def test_parse_fn_shapes_the_value_and_its_errors_fall_through(
    server: ScriptedOpenAI,
) -> None:
    server.script(
        tool_call("respond", {"city": "Atlantis", "days": 2}),
        text('{"city": "Kyoto", "days": 3}'),
    )

    def parse(raw: dict[str, Any]) -> tuple[str, int]:
        if raw["city"] == "Atlantis":
            raise ValueError("Atlantis is not a real city")
        return raw["city"], raw["days"]

    result = await structured_llm_call(
        llm_with(server, tool_call=True, json_mode=True), ASK, SCHEMA, parse_fn=parse
    )
    assert result.value == ("Kyoto", 3) and result.raw == GOOD
    assert result.level is StructuredLevel.JSON_MODE


async def test_a_context_overflow_stops_the_chain(server: ScriptedOpenAI) -> None:
    server.script(error(400, "prompt is too long", code="context_length_exceeded"))
    with pytest.raises(ContextOverflowError):
        await structured_llm_call(llm_with(server, tool_call=True, json_mode=True), ASK, SCHEMA)
    assert len(server.requests) == 1
