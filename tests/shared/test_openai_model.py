"""The OpenAI adapter through the real `openai` client against a scripted server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shuttle.llm.openai_model import OpenAIModel
from shuttle.llm.protocol import LLMError
from tests.support.scripted_openai import Reply, ScriptedOpenAI, error, text


@pytest.fixture
def server() -> Iterator[ScriptedOpenAI]:
    scripted = ScriptedOpenAI().start()
    yield scripted
    scripted.stop()


async def test_tool_calls_usage_and_model_are_read(server: ScriptedOpenAI) -> None:
    server.script(Reply(tool_calls=[("c1", "calculator", {"expression": "1+1"}), ("c2", "x", {})]))
    llm = OpenAIModel(server.base_url, "k", "scripted-model", 10, 0)
    result = await llm.chat([{"role": "user", "content": "hi"}])
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("c1", "calculator", '{"expression": "1+1"}'),
        ("c2", "x", "{}"),
    ]
    assert result.finish_reason == "tool_calls"
    assert result.usage.output_tokens == 7 and result.model == "scripted-model"


async def test_without_a_configured_model_the_endpoint_default_is_used(
    server: ScriptedOpenAI,
) -> None:
    server.script(text("hello"))
    llm = OpenAIModel(server.base_url, "", "", 10, 0)
    assert (await llm.chat([{"role": "user", "content": "hi"}])).content == "hello"
    assert llm.model == "scripted-model"
    assert server.requests[0]["model"] == "scripted-model"


async def test_transient_failures_are_retried(server: ScriptedOpenAI) -> None:
    server.script(error(503), error(429), text("made it"))
    llm = OpenAIModel(server.base_url, "k", "m", 10, 2)
    assert (await llm.chat([{"role": "user", "content": "hi"}])).content == "made it"
    assert len(server.requests) == 3


async def test_a_client_error_is_not_retried_and_says_what_happened(
    server: ScriptedOpenAI,
) -> None:
    server.script(error(400, "bad tool schema"))
    llm = OpenAIModel(server.base_url, "k", "m", 10, 2)
    with pytest.raises(LLMError, match="bad tool schema"):
        await llm.chat([{"role": "user", "content": "hi"}])
    assert len(server.requests) == 1


async def test_a_stream_yields_deltas_then_a_result_with_usage(server: ScriptedOpenAI) -> None:
    server.script(text("a b c", chunks=["a ", "b ", "c"]))
    stream = OpenAIModel(server.base_url, "k", "m", 10, 0).stream_chat(
        [{"role": "user", "content": "hi"}]
    )
    assert [delta async for delta in stream] == ["a ", "b ", "c"]
    assert stream.result.content == "a b c"
    assert stream.result.usage.output_tokens == 3
    assert stream.result.finish_reason == "stop"
    assert server.requests[0]["stream_options"] == {"include_usage": True}
