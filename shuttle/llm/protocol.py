"""Typed results of a chat call and the `LLM` port every engine talks to."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from shuttle.usage import TokenUsage

Message = dict[str, Any]
"""An OpenAI-format chat message (role, content, tool_calls, tool_call_id …)."""

ToolSchema = dict[str, Any]
"""An OpenAI-format tool definition: {"type": "function", "function": {...}}."""

ToolChoice = Literal["auto", "none", "required"] | dict[str, Any]
"""OpenAI `tool_choice`: a mode, or {"type": "function", "function": {"name": ...}}."""

ResponseFormat = dict[str, Any]
"""OpenAI `response_format`, e.g. {"type": "json_object"}."""

Role = Literal["general", "fast", "reasoning", "compact"]
ROLES: tuple[Role, ...] = ("general", "fast", "reasoning", "compact")


@dataclass(frozen=True)
class Abilities:
    """What an endpoint can do; callers pick the best path it supports."""

    tool_call: bool = True
    tool_choice: bool = True
    json_mode: bool = False
    streaming: bool = True
    thinking: bool = False


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


@dataclass(frozen=True)
class RetryNotice:
    """A failed attempt that will be tried again after `delay_seconds`."""

    model: str
    retry_count: int
    """1 for the first retry."""
    max_retries: int
    error_type: str
    """RATE_LIMIT for 429, LLM_ERROR for 5xx, timeouts and connection errors."""
    message: str
    delay_seconds: float
    retry_after: float | None
    """What the provider asked for (Retry-After / retry-after-ms), if anything."""


@dataclass(frozen=True)
class RecoveryNotice:
    """How a retried attempt ended."""

    model: str
    attempt: int
    """The attempt number, 2 for the first retry."""
    max_attempts: int
    error_type: str
    success: bool


Feature = Literal["tools", "response_format"]


@dataclass(frozen=True)
class FallbackNotice:
    """An endpoint refused a request feature; the call goes on without it (`action`)."""

    model: str
    feature: Feature
    action: Literal["json_mode", "plain_text"]
    message: str


class RetryObserver(Protocol):
    """Told about every retry and fallback, so a run can show it (ERROR_OCCURRED,
    ERROR_RECOVERY)."""

    async def on_retry(self, notice: RetryNotice) -> None: ...

    async def on_recovery(self, notice: RecoveryNotice) -> None: ...

    async def on_fallback(self, notice: FallbackNotice) -> None: ...


ReasoningSink = Callable[[str], Awaitable[None]]
"""Takes a thinking model's reasoning as it streams in, piece by piece."""


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

    @property
    def abilities(self) -> Abilities: ...

    @property
    def context_size(self) -> int | None:
        """The model's context window in tokens, when configured; None: not known."""
        ...

    async def chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        tool_choice: ToolChoice | None = None,
        response_format: ResponseFormat | None = None,
    ) -> ChatResult: ...

    def stream_chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        on_reasoning: ReasoningSink | None = None,
    ) -> ChatStream:
        """`on_reasoning` is awaited with each piece of a thinking model's reasoning as it
        streams in (it is not the answer, which the stream yields)."""
        ...

    def with_observer(self, observer: RetryObserver | None) -> LLM:
        """The same model, reporting its retries to `observer` (one view per run)."""
        ...

    def with_deadline(self, deadline: float | None) -> LLM:
        """The same model, each call (retries included) over by `deadline` (a
        `time.monotonic()` instant; None: no deadline), else DeadlineExceeded."""
        ...


class LLMError(Exception):
    """A model call failed for good (after our own retries)."""


class ContextOverflowError(LLMError):
    """The request does not fit the model's context window; retrying cannot help."""


class DeadlineExceeded(LLMError):
    """The caller's deadline passed, or would have before the next retry: given up."""


class FeatureUnsupported(LLMError):
    """The endpoint refused a request feature; the model no longer offers it (`abilities`),
    so the caller can ask again without it."""

    def __init__(self, feature: Feature, message: str) -> None:
        super().__init__(message)
        self.feature: Feature = feature
