"""Typed results of a chat call and the `LLM` port every engine talks to."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

Message = dict[str, Any]
"""An OpenAI-format chat message (role, content, tool_calls, tool_call_id …)."""

ToolSchema = dict[str, Any]
"""An OpenAI-format tool definition: {"type": "function", "function": {...}}."""


@dataclass(frozen=True)
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cost_usd + other.cost_usd,
        )

    def as_payload(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True)
class ToolCallRequest:
    id: str
    name: str
    arguments: str
    """Raw JSON text as the model produced it (it may be malformed)."""


@dataclass(frozen=True)
class ChatResult:
    content: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    reasoning_content: str = ""
    finish_reason: str = ""
    usage: TokenUsage = field(default_factory=TokenUsage)
    model: str = ""
    provider: str = ""
    duration_ms: int = 0


class ChatStream(Protocol):
    """Async iterator of answer text deltas; `result` holds the whole call once exhausted."""

    def __aiter__(self) -> AsyncIterator[str]: ...

    @property
    def result(self) -> ChatResult: ...


class LLM(Protocol):
    """One model bound to one endpoint. An agent keeps one instance for its whole run."""

    @property
    def model(self) -> str: ...

    @property
    def provider(self) -> str: ...

    @property
    def supports_tools(self) -> bool: ...

    async def chat(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = ()
    ) -> ChatResult: ...

    def stream_chat(self, messages: Sequence[Message]) -> ChatStream: ...


class LLMError(Exception):
    """A model call failed for good (after the client's own retries)."""
