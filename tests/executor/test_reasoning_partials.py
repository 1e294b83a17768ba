"""A thinking model's reasoning, streamed before its answer, reaches the log as LLM_PARTIAL
while it streams, apart from the answer's own deltas."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shuttle.llm.openai_model import OpenAIModel
from tests.executor.conftest import Backends, first, of_type, types_of
from tests.executor.test_event_catalogue import missing_fields
from tests.support.scripted_openai import ScriptedOpenAI, text

pytestmark = pytest.mark.integration

REASONING = "The user wants a greeting. A short one will do."


async def test_streamed_reasoning_becomes_llm_partial_events_before_the_answer(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    thinking = replace(text("Hello there."), reasoning=REASONING)
    model.script(text("Nothing to compute."), thinking)
    llm = OpenAIModel(model.base_url, "test-key", "scripted-model", 10.0, 0)
    try:
        events = await backends.run_to_end(backends.run_manager(llm), "Say hello")
    finally:
        await llm.close()

    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert missing_fields(events) == []
    partials = of_type(events, "LLM_PARTIAL")
    assert "".join(p["payload"]["chunk"] for p in partials) == REASONING
    assert [p["payload"]["chunk_index"] for p in partials] == list(range(len(partials)))
    assert [p["payload"]["total_tokens_so_far"] for p in partials] == list(
        range(1, len(partials) + 1)
    )
    assert {p["agent_id"] for p in partials} == {"agent-main"}
    kinds = types_of(events)
    assert kinds.index("LLM_PROMPT") < kinds.index("LLM_PARTIAL")
    assert max(i for i, k in enumerate(kinds) if k == "LLM_PARTIAL") < kinds.index(
        "THREAD_MESSAGE_DELTA"
    )
    # The answer is the answer alone; the reasoning stays with the call's output.
    answer = "".join(d["payload"]["delta"] for d in of_type(events, "THREAD_MESSAGE_DELTA"))
    assert answer == "Hello there."
    assert first(events, "THREAD_MESSAGE_COMPLETED")["payload"]["content"] == "Hello there."
