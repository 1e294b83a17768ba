"""Spans and metrics around the engine's ports, so the engine itself stays free of them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry.trace import Span, Status, StatusCode

from services.executor.ports import ToolDefinition, ToolHost, ToolInvocation, ToolOutcome
from shuttle.llm.protocol import LLM, ChatResult, ChatStream, Message, ToolSchema
from shuttle.metrics import LLM_CALLS, LLM_COST, LLM_TOKENS, TOOL_CALLS, TOOL_SECONDS
from shuttle.telemetry import tracer


class TracedToolHost:
    """A ToolHost whose every call is an `execute_tool` span and a metric sample."""

    def __init__(self, inner: ToolHost) -> None:
        self._inner = inner

    async def list_tools(self, tenant_id: str) -> Sequence[ToolDefinition]:
        return await self._inner.list_tools(tenant_id)

    async def execute(self, call: ToolInvocation) -> ToolOutcome:
        with tracer.start_as_current_span(f"execute_tool {call.name}") as span:
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.name", call.name)
            span.set_attribute("gen_ai.tool.call.id", call.call_id)
            span.set_attribute("shuttle.workflow_id", call.workflow_id)
            outcome = await self._inner.execute(call)
            span.set_attribute("shuttle.tool.blocked", outcome.blocked)
            if outcome.error:
                span.set_attribute("error.type", "tool_error")
                span.set_status(Status(StatusCode.ERROR, outcome.error[:200]))
        result = "blocked" if outcome.blocked else ("error" if outcome.error else "ok")
        TOOL_CALLS.labels(call.name, result).inc()
        TOOL_SECONDS.labels(call.name).observe(outcome.duration_ms / 1000)
        return outcome


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

    async def chat(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = ()
    ) -> ChatResult:
        with _chat_span(self._inner) as span:
            try:
                result = await self._inner.chat(messages, tools)
            except Exception:
                LLM_CALLS.labels(self._inner.model or "default", "error").inc()
                raise
            _record(span, result)
        return result

    def stream_chat(self, messages: Sequence[Message]) -> ChatStream:
        return _TracedStream(self._inner, self._inner.stream_chat(messages))


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
