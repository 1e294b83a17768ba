"""The OpenAI adapter through the real `openai` client against a scripted server."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from shuttle.llm.factory import build_registry
from shuttle.llm.openai_model import HttpClientKind, ModelOptions, OpenAIModel
from shuttle.llm.protocol import LLMError, ToolSchema
from shuttle.settings import Settings
from tests.support.scripted_openai import Reply, ScriptedOpenAI, error, text
from tests.support.stack import free_ports


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


async def test_a_request_orjson_refuses_is_still_sent_whole(server: ScriptedOpenAI) -> None:
    # A lone surrogate (a file name read with surrogateescape) and an int beyond 64 bits.
    server.script(text("ok"))
    llm = OpenAIModel(server.base_url, "k", "m", 10, 0)
    bounded: ToolSchema = {
        "type": "function",
        "function": {
            "name": "count",
            "parameters": {"type": "object", "properties": {"n": {"maximum": 2**70}}},
        },
    }
    result = await llm.chat([{"role": "user", "content": "open caf\udce9.txt"}], [bounded])
    assert result.content == "ok"
    sent = server.requests[0]
    assert sent["messages"][0]["content"] == "open caf\udce9.txt"
    assert sent["tools"][0]["function"]["parameters"]["properties"]["n"]["maximum"] == 2**70


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


async def test_a_reply_without_choices_is_an_error_that_shows_the_reply(
    server: ScriptedOpenAI,
) -> None:
    server.script(Reply(body={"object": "chat.completion", "detail": "upstream overloaded"}))
    server.script(Reply(body=["not", "an", "object"]))
    llm = OpenAIModel(server.base_url, "k", "m", 10, 0)
    with pytest.raises(LLMError, match=r"no choices.*upstream overloaded"):
        await llm.chat([{"role": "user", "content": "hi"}])
    with pytest.raises(LLMError, match="no choices"):
        await llm.chat([{"role": "user", "content": "hi"}])


async def test_unusual_tool_calls_are_read_as_far_as_they_make_sense(
    server: ScriptedOpenAI,
) -> None:
    calls = [
        # No id, no type, arguments as an object rather than JSON text (seen from local servers).
        {"function": {"name": "calculator", "arguments": {"expression": "2+2"}}},
        {"id": "c2", "type": "function", "function": {"arguments": "{}"}},  # no name: skipped
        {"id": "c3", "type": "retrieval", "function": {"name": "x", "arguments": "{}"}},
        "not a call",
    ]
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    server.script(Reply(body={"choices": [{"message": message}]}))
    llm = OpenAIModel(server.base_url, "k", "m", 10, 0)
    result = await llm.chat([{"role": "user", "content": "what is 2+2?"}])
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("call_0", "calculator", '{"expression": "2+2"}')
    ]
    assert result.content == "" and result.finish_reason == "" and result.model == "m"
    # No usage reported: our estimate, so budgets still move.
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
async def test_either_http_client_chats_streams_and_closes(
    server: ScriptedOpenAI, kind: HttpClientKind
) -> None:
    server.script(error(503), text("made it"), text("streamed"))
    llm = OpenAIModel(server.base_url, "k", "m", 10, 1, options=ModelOptions(http_client=kind))
    assert (await llm.chat([{"role": "user", "content": "hi"}])).content == "made it"
    stream = llm.stream_chat([{"role": "user", "content": "hi"}])
    assert "".join([delta async for delta in stream]) == "streamed"
    await llm.close()
    assert llm._endpoint.client.is_closed()


SDK_CLIENTS = {"aiohttp": openai.DefaultAioHttpClient, "httpx": openai.DefaultAsyncHttpxClient}


@pytest.mark.parametrize("setting", ["aiohttp", "httpx"])
async def test_models_use_the_configured_http_client_and_the_registry_closes_them(
    server: ScriptedOpenAI, setting: HttpClientKind
) -> None:
    settings = Settings(openai_base_url=server.base_url, llm_http_client=setting)
    untraced = build_registry(settings)
    model = untraced.default
    assert isinstance(model, OpenAIModel)
    registry = untraced.traced()  # as the services hold it
    server.script(text("hello"))
    assert (await registry.default.chat([{"role": "user", "content": "hi"}])).content == "hello"
    client = model._endpoint.client
    # The SDK's HTTP client, as configured (its aiohttp client is no httpx one, nor the reverse).
    for kind, sdk_client in SDK_CLIENTS.items():
        assert isinstance(client._client, sdk_client) == (kind == setting)
    await registry.close()
    assert client.is_closed()


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
async def test_an_endpoint_that_refuses_connections_is_named_not_called_slow(
    kind: HttpClientKind,
) -> None:
    [port] = free_ports(1)  # nothing listens there
    llm = OpenAIModel(
        f"http://127.0.0.1:{port}/v1", "k", "m", 10, 1, options=ModelOptions(http_client=kind)
    )
    with pytest.raises(LLMError) as failed:
        await llm.chat([{"role": "user", "content": "hi"}])
    message = str(failed.value)
    assert f"cannot reach http://127.0.0.1:{port}/v1" in message
    assert "refused" in message.lower() or "connect call failed" in message.lower()
    assert "timed out" not in message
    await llm.close()
