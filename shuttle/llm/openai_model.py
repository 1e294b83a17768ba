"""An OpenAI-compatible endpoint through the official `openai` client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import openai

from shuttle.llm.protocol import (
    ChatResult,
    LLMError,
    Message,
    TokenUsage,
    ToolCallRequest,
    ToolSchema,
)


class OpenAIModel:
    """Chat and streamed chat against one endpoint; 429/5xx/connection errors are retried by the
    client itself (`max_retries`, exponential backoff honouring Retry-After)."""

    provider = "openai"
    supports_tools = True

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str = "",
        timeout_seconds: float = 120.0,
        max_retries: int = 2,
    ) -> None:
        self._client = openai.AsyncOpenAI(
            base_url=base_url or None,
            # Local servers (vLLM, Ollama, llama.cpp) take any key; the client insists on one.
            api_key=api_key or "not-needed",
            timeout=timeout_seconds,
            max_retries=max_retries,
        )
        self._model = model
        self._model_lock = asyncio.Lock()

    @property
    def model(self) -> str:
        return self._model

    async def _resolved_model(self) -> str:
        """The configured model, else the first one the endpoint lists (its default)."""
        if self._model:
            return self._model
        async with self._model_lock:
            if not self._model:
                try:
                    page = await self._client.models.list()
                except openai.OpenAIError as exc:
                    raise LLMError(
                        f"no model configured and the endpoint did not list any ({exc}); "
                        "set SHUTTLE_MODEL"
                    ) from exc
                if not page.data:
                    raise LLMError("the endpoint lists no models; set SHUTTLE_MODEL")
                self._model = page.data[0].id
        return self._model

    async def chat(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = ()
    ) -> ChatResult:
        model = await self._resolved_model()
        extra: dict[str, Any] = {"tools": list(tools)} if tools else {}
        started = time.monotonic()
        # Our messages are plain OpenAI-format dicts; the SDK's TypedDict union adds nothing.
        wire_messages: Any = list(messages)
        try:
            response = await self._client.chat.completions.create(
                model=model, messages=wire_messages, **extra
            )
        except openai.OpenAIError as exc:
            raise LLMError(f"{model}: {exc}") from exc
        if not response.choices:
            raise LLMError(f"{model}: the response has no choices")
        choice = response.choices[0]
        message = choice.message
        calls = tuple(
            ToolCallRequest(id=call.id, name=call.function.name, arguments=call.function.arguments)
            for call in (message.tool_calls or [])
            if call.type == "function"
        )
        return ChatResult(
            content=message.content or "",
            tool_calls=calls,
            reasoning_content=str(getattr(message, "reasoning_content", None) or ""),
            finish_reason=choice.finish_reason or "",
            usage=_usage(response.usage),
            model=response.model or model,
            provider=self.provider,
            duration_ms=int((time.monotonic() - started) * 1000),
        )

    def stream_chat(self, messages: Sequence[Message]) -> OpenAIChatStream:
        return OpenAIChatStream(self, list(messages))

    async def _open_stream(self, messages: list[Message]) -> tuple[str, Any]:
        model = await self._resolved_model()
        wire_messages: Any = messages
        try:
            stream = await self._client.chat.completions.create(
                model=model,
                messages=wire_messages,
                stream=True,
                stream_options={"include_usage": True},
            )
        except openai.OpenAIError as exc:
            raise LLMError(f"{model}: {exc}") from exc
        return model, stream

    async def close(self) -> None:
        await self._client.close()


class OpenAIChatStream:
    def __init__(self, llm: OpenAIModel, messages: list[Message]) -> None:
        self._llm = llm
        self._messages = messages
        self._result: ChatResult | None = None

    @property
    def result(self) -> ChatResult:
        if self._result is None:
            raise RuntimeError("the stream has not been read to its end")
        return self._result

    async def __aiter__(self) -> AsyncIterator[str]:
        started = time.monotonic()
        model, stream = await self._llm._open_stream(self._messages)
        parts: list[str] = []
        finish_reason = ""
        usage = TokenUsage()
        try:
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = _usage(chunk.usage)
                if chunk.model:
                    model = chunk.model
                for choice in chunk.choices:
                    finish_reason = choice.finish_reason or finish_reason
                    text = choice.delta.content if choice.delta else None
                    if text:
                        parts.append(text)
                        yield text
        except openai.OpenAIError as exc:
            raise LLMError(f"{model}: stream broke off: {exc}") from exc
        self._result = ChatResult(
            content="".join(parts),
            finish_reason=finish_reason,
            usage=usage,
            model=model,
            provider=self._llm.provider,
            duration_ms=int((time.monotonic() - started) * 1000),
        )


def _usage(raw: Any) -> TokenUsage:
    if raw is None:
        return TokenUsage()
    details = getattr(raw, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", 0) or 0
    return TokenUsage(
        input_tokens=raw.prompt_tokens or 0,
        output_tokens=raw.completion_tokens or 0,
        cached_tokens=cached,
    )
