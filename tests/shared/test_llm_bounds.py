"""Bounds and fallbacks of the LLM layer through the real `openai` client against the scripted
server: the output cap, the deadline of a call and its retries, refused features."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from shuttle.llm.factory import ModelRegistry, build_registry
from shuttle.llm.openai_model import OpenAIModel
from shuttle.llm.protocol import DeadlineExceeded, FeatureUnsupported, LLMError
from shuttle.settings import Settings
from tests.shared.test_llm_layer import HI, Recorder, model
from tests.support.scripted_openai import ScriptedOpenAI, error, text

TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {}}}]
JSON_OBJECT = {"type": "json_object"}


@pytest.fixture
def server() -> Iterator[ScriptedOpenAI]:
    scripted = ScriptedOpenAI().start()
    yield scripted
    scripted.stop()


def models_file(
    tmp_path: Path, server: ScriptedOpenAI, extra: str = "", retries: int = 0
) -> Settings:
    path = tmp_path / "models.yaml"
    path.write_text(
        f"models:\n  - name: local\n    model: scripted-model\n"
        f"    base_url: {server.base_url}\n{extra}"
    )
    return Settings(models_file=path, llm_max_retries=retries, llm_retry_base_seconds=0.001)


@pytest.fixture
async def registries() -> AsyncIterator[list[ModelRegistry]]:
    built: list[ModelRegistry] = []
    yield built
    for registry in built:
        await registry.close()


async def test_the_output_cap_is_the_default_unless_the_models_file_gives_one(
    server: ScriptedOpenAI, tmp_path: Path, registries: list[ModelRegistry]
) -> None:
    server.script(text("a"), text("b"))
    default = build_registry(models_file(tmp_path, server))
    own = build_registry(models_file(tmp_path, server, "    max_output_tokens: 64\n"))
    registries += [default, own]
    await default.default.chat(HI)
    await own.default.chat(HI)
    assert [r["max_tokens"] for r in server.requests] == [Settings().llm_max_output_tokens, 64]


async def test_no_retry_is_waited_for_past_the_deadline(server: ScriptedOpenAI) -> None:
    server.script(error(503, "overloaded", headers={"retry-after": "30"}), text("too late"))
    recorder = Recorder()
    llm = model(server, retries=3).with_observer(recorder).with_deadline(time.monotonic() + 5)
    with pytest.raises(DeadlineExceeded, match="out of time"):
        await llm.chat(HI)
    assert len(server.requests) == 1 and recorder.retries == []


async def test_a_call_after_its_deadline_is_not_sent(server: ScriptedOpenAI) -> None:
    llm = model(server).with_deadline(time.monotonic() - 1)
    with pytest.raises(DeadlineExceeded):
        await llm.chat(HI)
    assert server.requests == []


async def test_a_refused_response_format_is_asked_again_as_plain_text(
    server: ScriptedOpenAI,
) -> None:
    server.script(
        error(400, "'response_format' of type 'json_object' is not supported with this model."),
        text('{"ok": true}'),
    )
    recorder = Recorder()
    llm = model(server, retries=2).with_observer(recorder)
    assert (await llm.chat(HI, response_format=JSON_OBJECT)).content == '{"ok": true}'
    assert [("response_format" in r) for r in server.requests] == [True, False]
    (notice,) = recorder.fallbacks
    assert (notice.feature, notice.action) == ("response_format", "plain_text")
    assert llm.abilities.json_mode is False and recorder.retries == []


async def test_refused_tools_are_remembered_for_the_endpoint(server: ScriptedOpenAI) -> None:
    server.script(error(400, '"auto" tool choice requires --enable-auto-tool-choice and ...'))
    first: OpenAIModel = model(server)
    with pytest.raises(FeatureUnsupported) as refused:
        await first.chat(HI, TOOLS)
    assert refused.value.feature == "tools"
    # Another instance for the same endpoint and model knows it too.
    assert model(server).supports_tools is False


async def test_an_unrelated_400_about_tools_is_an_error_and_changes_nothing(
    server: ScriptedOpenAI,
) -> None:
    server.script(error(400, "tools[0].function.name: string does not match pattern"))
    llm = model(server)
    with pytest.raises(LLMError) as failed:
        await llm.chat(HI, TOOLS)
    assert not isinstance(failed.value, FeatureUnsupported)
    assert llm.supports_tools is True


async def test_abilities_the_models_file_states_win_over_a_refusal(
    server: ScriptedOpenAI, tmp_path: Path, registries: list[ModelRegistry]
) -> None:
    server.script(error(500, "tools param requires --jinja flag"))
    abilities = "    abilities: {tool_call: true}\n"
    stated = build_registry(models_file(tmp_path, server, abilities, retries=2))
    registries.append(stated)
    with pytest.raises(LLMError) as failed:
        await stated.default.chat(HI, TOOLS)
    assert not isinstance(failed.value, FeatureUnsupported)
    assert stated.default.supports_tools is True
    assert len(server.requests) == 1  # a refusal is not retried


async def test_the_context_size_is_the_models_file_s_when_it_gives_one(
    server: ScriptedOpenAI, tmp_path: Path, registries: list[ModelRegistry]
) -> None:
    given = build_registry(models_file(tmp_path, server, "    context_size: 8192\n"))
    unknown = build_registry(models_file(tmp_path, server))
    registries += [given, unknown]
    assert (given.default.context_size, unknown.default.context_size) == (8192, None)
