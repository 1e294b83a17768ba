"""The LLM layer through the real `openai` client against the scripted server: retries and
their reports, context overflow, timeouts, streamed tool calls, reasoning, usage and cost."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from shuttle.llm.openai_model import ModelOptions, OpenAIModel
from shuttle.llm.protocol import (
    Abilities,
    ContextOverflowError,
    FallbackNotice,
    LLMError,
    RecoveryNotice,
    RetryNotice,
)
from shuttle.llm.registry import Prices
from shuttle.llm.tokens import estimate_message_tokens, estimate_tokens
from tests.support.scripted_openai import Reply, ScriptedOpenAI, error, text

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server() -> Iterator[ScriptedOpenAI]:
    scripted = ScriptedOpenAI().start()
    yield scripted
    scripted.stop()


@dataclass
class Recorder:
    retries: list[RetryNotice] = field(default_factory=list)
    recoveries: list[RecoveryNotice] = field(default_factory=list)
    fallbacks: list[FallbackNotice] = field(default_factory=list)

    async def on_retry(self, notice: RetryNotice) -> None:
        self.retries.append(notice)

    async def on_recovery(self, notice: RecoveryNotice) -> None:
        self.recoveries.append(notice)

    async def on_fallback(self, notice: FallbackNotice) -> None:
        self.fallbacks.append(notice)


def model(
    server: ScriptedOpenAI, retries: int = 0, timeout: float = 10.0, **options: object
) -> OpenAIModel:
    return OpenAIModel(
        server.base_url,
        "k",
        "scripted-model",
        timeout,
        retries,
        options=ModelOptions(**options),  # type: ignore[arg-type]
        retry_base_seconds=0.001,
    )


async def test_429_and_500_are_retried_and_each_retry_is_reported(server: ScriptedOpenAI) -> None:
    server.script(
        error(429, "slow down", headers={"retry-after-ms": "30"}),
        error(500, "upstream hiccup"),
        text("made it"),
    )
    recorder = Recorder()
    llm = model(server, retries=3).with_observer(recorder)
    assert (await llm.chat(HI)).content == "made it"
    assert len(server.requests) == 3
    first, second = recorder.retries
    assert (first.error_type, first.retry_count, first.max_retries) == ("RATE_LIMIT", 1, 3)
    assert first.retry_after == pytest.approx(0.03)
    assert first.delay_seconds == pytest.approx(0.03)  # the provider's wait, not our backoff
    assert "slow down" in first.message
    assert (second.error_type, second.retry_count, second.retry_after) == ("LLM_ERROR", 2, None)
    assert [(r.attempt, r.success, r.max_attempts) for r in recorder.recoveries] == [
        (2, False, 4),
        (3, True, 4),
    ]


async def test_retry_after_in_seconds_is_honoured(server: ScriptedOpenAI) -> None:
    server.script(error(503, headers={"Retry-After": "0.05"}), text("ok"))
    recorder = Recorder()
    await model(server, retries=1).with_observer(recorder).chat(HI)
    assert recorder.retries[0].retry_after == pytest.approx(0.05)
    assert recorder.retries[0].delay_seconds == pytest.approx(0.05)


async def test_retries_run_out_into_an_llm_error(server: ScriptedOpenAI) -> None:
    server.script(*[error(502, "bad gateway")] * 3)
    recorder = Recorder()
    with pytest.raises(LLMError, match="bad gateway"):
        await model(server, retries=2).with_observer(recorder).chat(HI)
    assert len(server.requests) == 3
    assert [r.retry_count for r in recorder.retries] == [1, 2]
    assert [r.success for r in recorder.recoveries] == [False, False]


async def test_the_sdk_does_not_retry_behind_our_back(server: ScriptedOpenAI) -> None:
    server.script(error(500), text("never reached"))
    with pytest.raises(LLMError):
        await model(server, retries=0).chat(HI)
    assert len(server.requests) == 1


async def test_a_context_overflow_is_recognised_and_not_retried(server: ScriptedOpenAI) -> None:
    server.script(
        error(
            400,
            "This model's maximum context length is 8192 tokens.",
            code="context_length_exceeded",
        )
    )
    with pytest.raises(ContextOverflowError, match="maximum context length"):
        await model(server, retries=2).chat(HI)
    assert len(server.requests) == 1


async def test_a_call_slower_than_its_timeout_fails_after_its_retries(
    server: ScriptedOpenAI,
) -> None:
    server.script(Reply(content="late", delay=2.0), Reply(content="late", delay=2.0))
    recorder = Recorder()
    with pytest.raises(LLMError, match="timed out"):
        await model(server, retries=1, timeout=0.2).with_observer(recorder).chat(HI)
    assert recorder.retries[0].error_type == "LLM_ERROR"


async def test_tool_choice_response_format_and_max_tokens_are_sent(
    server: ScriptedOpenAI,
) -> None:
    server.script(text("{}"))
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    choice = {"type": "function", "function": {"name": "f"}}
    llm = model(server, max_output_tokens=256)
    await llm.chat(HI, [tool], tool_choice=choice, response_format={"type": "json_object"})
    sent = server.requests[0]
    assert sent["tools"] == [tool] and sent["tool_choice"] == choice
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["max_tokens"] == 256 and sent["messages"] == HI


async def test_usage_counts_cached_tokens_and_prices_the_call(server: ScriptedOpenAI) -> None:
    usage = {
        "prompt_tokens": 1_000,
        "completion_tokens": 200,
        "total_tokens": 1_200,
        "prompt_tokens_details": {"cached_tokens": 400},
    }
    server.script(Reply(content="ok", usage=usage, reasoning="I thought about it."))
    prices = Prices(input_per_1m=2.0, output_per_1m=10.0, cached_input_per_1m=0.5)
    result = await model(server, prices=prices).chat(HI)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (1_000, 200)
    assert result.usage.cached_tokens == 400
    assert result.usage.cost_usd == pytest.approx((600 * 2.0 + 400 * 0.5 + 200 * 10.0) / 1e6)
    assert result.reasoning_content == "I thought about it."


@pytest.mark.parametrize("reuse_index_zero", [False, True])
async def test_streamed_tool_calls_are_joined_per_call(
    server: ScriptedOpenAI, reuse_index_zero: bool
) -> None:
    server.script(
        Reply(
            tool_calls=[
                ("call_a", "calculator", {"expression": "1+1"}),
                ("call_b", "search", {"q": "weather in Kyoto"}),
            ],
            reuse_index_zero=reuse_index_zero,
            reasoning="Two tools are needed.",
        )
    )
    stream = model(server).stream_chat(HI)
    assert [d async for d in stream] == []
    calls = [(c.id, c.name, c.arguments) for c in stream.result.tool_calls]
    assert calls == [
        ("call_a", "calculator", '{"expression": "1+1"}'),
        ("call_b", "search", '{"q": "weather in Kyoto"}'),
    ]
    assert stream.result.finish_reason == "tool_calls"
    assert stream.result.reasoning_content == "Two tools are needed."


async def test_a_model_without_streaming_answers_in_one_delta(server: ScriptedOpenAI) -> None:
    server.script(text("all at once"))
    stream = model(server, abilities=Abilities(streaming=False)).stream_chat(HI)
    assert [d async for d in stream] == ["all at once"]
    assert "stream" not in server.requests[0]
    assert stream.result.content == "all at once"


async def test_opening_a_stream_is_retried(server: ScriptedOpenAI) -> None:
    server.script(error(429), text("a b", chunks=["a ", "b"]))
    recorder = Recorder()
    stream = model(server, retries=1).with_observer(recorder).stream_chat(HI)
    assert [d async for d in stream] == ["a ", "b"]
    assert [r.success for r in recorder.recoveries] == [True]


def test_token_estimates_grow_with_text_and_count_wide_characters_fully() -> None:
    assert estimate_tokens("") == 0
    english = "The quick brown fox jumps over the lazy dog. " * 10
    assert estimate_tokens(english) < estimate_tokens(english * 2)
    assert len(english) / 6 < estimate_tokens(english) < len(english) / 2
    japanese = "東京の天気を教えてください"
    assert estimate_tokens(japanese) >= len(japanese)
    one = [{"role": "user", "content": english}]
    assert estimate_message_tokens(one * 2) > 2 * estimate_tokens(english)


def test_token_estimate_of_mixed_text_is_a_quarter_per_ascii_character_plus_one_per_wide() -> None:
    # 40 ASCII characters (10 tokens), 3 wide ones (a token each), in any order.
    assert estimate_tokens("abcd" * 5 + "東" + "wxyz" * 5 + "京😀") == 13
    assert estimate_tokens("é") == 1
    assert estimate_tokens("a") == 1
