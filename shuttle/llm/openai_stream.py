"""Streamed chat against an OpenAI-compatible endpoint: answer text as it arrives."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

import openai

from shuttle.llm.protocol import (
    Abilities,
    ChatResult,
    LLMError,
    Message,
    ReasoningSink,
    ToolSchema,
)
from shuttle.llm.wire import (
    ToolCallAccumulator,
    encodable,
    mapping,
    reasoning_of,
    text_of,
    usage_of,
)
from shuttle.usage import TokenUsage
from shuttle.utf8 import StreamedText


class StreamingModel(Protocol):
    """What a stream needs of the model that opens it (OpenAIModel)."""

    @property
    def provider(self) -> str: ...

    @property
    def abilities(self) -> Abilities: ...

    async def chat(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema]
    ) -> ChatResult: ...

    async def open_stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema]
    ) -> tuple[str, openai.AsyncStream[Any]]: ...

    def priced(self, usage: TokenUsage) -> TokenUsage: ...

    def estimated_usage(self, messages: Sequence[Message], output: str) -> TokenUsage: ...


class OpenAIChatStream:
    """Yields answer text as it arrives; tool calls, reasoning and usage land in `result`.

    Only opening the stream is retried: once text has been handed out, a broken stream is
    an error rather than a silent restart that would repeat it.
    """

    def __init__(
        self, llm: StreamingModel, messages: list[Message], tools: list[ToolSchema]
    ) -> None:
        self._llm = llm
        self._messages = messages
        self._tools = tools
        self._result: ChatResult | None = None
        self.on_reasoning: ReasoningSink | None = None
        """Told each piece of the model's reasoning as it arrives."""

    @property
    def result(self) -> ChatResult:
        if self._result is None:
            raise RuntimeError("the stream has not been read to its end")
        return self._result

    async def __aiter__(self) -> AsyncIterator[str]:
        if not self._llm.abilities.streaming:
            # The endpoint cannot stream: one ordinary call, handed out as a single delta.
            self._result = await self._llm.chat(self._messages, self._tools)
            if self._result.content:
                yield self._result.content
            return
        started = time.monotonic()
        model, stream = await self._llm.open_stream(self._messages, self._tools)
        parts: list[str] = []
        answer = StreamedText()
        reasoning: list[str] = []
        calls = ToolCallAccumulator()
        finish_reason = ""
        usage: TokenUsage | None = None
        try:
            async for raw in stream:
                chunk = mapping(raw)
                if chunk.get("usage") is not None:
                    usage = usage_of(chunk["usage"])
                model = text_of(chunk.get("model")) or model
                choices = chunk.get("choices")
                for choice in map(mapping, choices if isinstance(choices, list) else ()):
                    finish_reason = text_of(choice.get("finish_reason")) or finish_reason
                    delta = mapping(choice.get("delta"))
                    call_deltas = delta.get("tool_calls")
                    for call_delta in call_deltas if isinstance(call_deltas, list) else ():
                        calls.add(mapping(call_delta))
                    thought = reasoning_of(delta)
                    if thought:
                        reasoning.append(thought)
                        if self.on_reasoning is not None:
                            await self.on_reasoning(thought)
                    piece = answer.piece(text_of(delta.get("content")))
                    if piece:
                        parts.append(piece)
                        yield piece
        except openai.OpenAIError as exc:
            raise LLMError(f"{model}: stream broke off: {exc}") from exc
        tail = answer.rest()
        if tail:
            parts.append(tail)
            yield tail
        content = "".join(parts)
        tool_calls = calls.calls()
        if usage is None:
            usage = self._llm.estimated_usage(self._messages, content)
        self._result = encodable(
            ChatResult(
                content=content,
                tool_calls=tool_calls,
                reasoning_content="".join(reasoning),
                finish_reason=finish_reason,
                usage=self._llm.priced(usage),
                model=model,
                provider=self._llm.provider,
                duration_ms=int((time.monotonic() - started) * 1000),
            )
        )
