"""A scripted model provider and models with chosen abilities, through the real client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shuttle.llm.openai_model import ModelOptions, OpenAIModel
from shuttle.llm.protocol import Abilities
from tests.support.scripted_openai import ScriptedOpenAI


@pytest.fixture
def server() -> Iterator[ScriptedOpenAI]:
    scripted = ScriptedOpenAI().start()
    yield scripted
    scripted.stop()


def llm_with(
    server: ScriptedOpenAI, *, tool_call: bool, json_mode: bool, tool_choice: bool | None = None
) -> OpenAIModel:
    abilities = Abilities(
        tool_call=tool_call,
        tool_choice=tool_call if tool_choice is None else tool_choice,
        json_mode=json_mode,
    )
    return OpenAIModel(
        server.base_url, "k", "scripted-model", 10.0, 0, options=ModelOptions(abilities=abilities)
    )
