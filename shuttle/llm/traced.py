"""Spans and metrics around any LLM: each call a GenAI `chat` span and a metric sample."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry.trace import Span

from shuttle.llm.protocol import (
    LLM,
    Abilities,
    ChatResult,
    ChatStream,
    Message,
    ReasoningSink,
    ResponseFormat,
    RetryObserver,
    ToolChoice,
    ToolSchema,
)
from shuttle.metrics import LLM_CALLS, LLM_COST, LLM_TOKENS
from shuttle.telemetry import tracer


class TracedLLM:
    """An LLM whose every call is a GenAI `chat` span and a metric sample. Attributes it does
    not wrap (abilities, context size, …) are the inner model's."""

    def __init__(self, inner: LLM) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def model(self) -> str:
        return self._inner.model

    @property
    def provider(self) -> str:
        return self._inner.provider

    @property
    def supports_tools(self) -> bool:
        return self._inner.supports_tools

    @property
    def abilities(self) -> Abilities:
        return self._inner.abilities

    @property
    def context_size(self) -> int | None:
        return self._inner.context_size

    def with_observer(self, observer: RetryObserver | None) -> LLM:
        return TracedLLM(self._inner.with_observer(observer))

    def with_deadline(self, deadline: float | None) -> LLM:
        return TracedLLM(self._inner.with_deadline(deadline))

    async def chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        tool_choice: ToolChoice | None = None,
        response_format: ResponseFormat | None = None,
    ) -> ChatResult:
        with _chat_span(self._inner) as span:
            try:
                result = await self._inner.chat(
                    messages, tools, tool_choice=tool_choice, response_format=response_format
                )
            except Exception:
                LLM_CALLS.labels(self._inner.model or "default", "error").inc()
                raise
            _record(span, result)
        return result

    def stream_chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        on_reasoning: ReasoningSink | None = None,
    ) -> ChatStream:
        inner = self._inner.stream_chat(messages, tools, on_reasoning=on_reasoning)
        return _TracedStream(self._inner, inner)


class _TracedStream:
    def __init__(self, llm: LLM, inner: ChatStream) -> None:
        self._llm = llm
        self._inner = inner

    @property
    def result(self) -> ChatResult:
        return self._inner.result

    async def __aiter__(self) -> AsyncIterator[str]:
        with _chat_span(self._llm, streaming=True) as span:
            try:
                async for delta in self._inner:
                    yield delta
            except Exception:
                LLM_CALLS.labels(self._llm.model or "default", "error").inc()
                raise
            _record(span, self._inner.result)


@contextmanager
def _chat_span(llm: LLM, streaming: bool = False) -> Iterator[Span]:
    with tracer.start_as_current_span(f"chat {llm.model}".strip()) as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.system", llm.provider)
        span.set_attribute("gen_ai.request.model", llm.model)
        span.set_attribute("shuttle.llm.streaming", streaming)
        yield span


def _record(span: Span, result: ChatResult) -> None:
    usage = result.usage
    span.set_attribute("gen_ai.response.model", result.model)
    span.set_attribute("gen_ai.request.model", result.model)
    span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    span.set_attribute("gen_ai.response.finish_reasons", [result.finish_reason or "unknown"])
    model = result.model or "default"
    LLM_CALLS.labels(model, "ok").inc()
    LLM_TOKENS.labels(model, "input").inc(usage.input_tokens)
    LLM_TOKENS.labels(model, "output").inc(usage.output_tokens)
    LLM_COST.labels(model).inc(usage.cost_usd)
