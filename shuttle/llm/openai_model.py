"""An OpenAI-compatible endpoint through the official `openai` client.

Bodies are built by `shuttle.llm.wire` and sent with the client's `post` (flat per-call
overhead); retries are ours (`shuttle.llm.retry`) so that each one is visible to the run.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

import openai

from shuttle.llm.protocol import (
    Abilities,
    ChatResult,
    ContextOverflowError,
    LLMError,
    Message,
    ReasoningSink,
    ResponseFormat,
    RetryObserver,
    ToolChoice,
    ToolSchema,
)
from shuttle.llm.registry import Prices
from shuttle.llm.retry import Retrier, RetryPolicy
from shuttle.llm.tokens import estimate_message_tokens, estimate_tokens
from shuttle.llm.wire import (
    JSON_HEADERS,
    ChatRequest,
    ToolCallAccumulator,
    encodable,
    mapping,
    reasoning_of,
    text_of,
    tool_calls_of,
    usage_of,
)
from shuttle.usage import TokenUsage
from shuttle.utf8 import StreamedText

T = TypeVar("T")

DEFAULT_ABILITIES = Abilities(tool_call=True, tool_choice=True, json_mode=True, streaming=True)
"""What an endpoint named only by OPENAI_BASE_URL is assumed to support."""

# How providers word "the prompt is too long" (OpenAI, vLLM, llama.cpp, Ollama, Anthropic-compat).
_OVERFLOW = re.compile(
    r"context[_ ]length[_ ]exceeded|maximum context length|context window|"
    r"prompt is too long|too many tokens|exceeds? the (?:model's )?(?:max|context)",
    re.IGNORECASE,
)


def is_context_overflow(exc: BaseException) -> bool:
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in (400, 413, 422):
        return False
    code = getattr(exc, "code", None)
    return code == "context_length_exceeded" or bool(_OVERFLOW.search(str(exc)))


@dataclass
class _Endpoint:
    """State shared by every view of one model: the client and the resolved model name."""

    client: openai.AsyncOpenAI
    model: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


HttpClientKind = Literal["aiohttp", "httpx"]


def http_client_for(kind: HttpClientKind) -> openai.DefaultAsyncHttpxClient | None:
    """The SDK's client on aiohttp, or None for its default (httpx). With a hundred calls in
    flight, httpx's pool walked every open connection on each request and each response
    close: 15 % of the executor's CPU. aiohttp keeps its idle connections per host."""
    return openai.DefaultAioHttpClient() if kind == "aiohttp" else None


@dataclass(frozen=True)
class ModelOptions:
    name: str = ""
    """The registry name (what `model_hint` refers to); empty means the wire model."""
    abilities: Abilities = DEFAULT_ABILITIES
    prices: Prices = field(default_factory=Prices)
    context_size: int = 128_000
    max_output_tokens: int | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout_seconds: float = 120.0
    http_client: HttpClientKind = "aiohttp"


class OpenAIModel:
    """Chat and streamed chat against one OpenAI-compatible endpoint."""

    provider = "openai"

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str = "",
        timeout_seconds: float = 120.0,
        max_retries: int = 2,
        *,
        options: ModelOptions | None = None,
        retry_base_seconds: float | None = None,
        http_client: openai.DefaultAsyncHttpxClient | None = None,
    ) -> None:
        opts = options or ModelOptions()
        policy = replace(opts.retry, max_retries=max_retries)
        if retry_base_seconds is not None:
            policy = replace(policy, base_delay_seconds=retry_base_seconds)
        self._options = replace(opts, retry=policy, timeout_seconds=timeout_seconds)
        client = openai.AsyncOpenAI(
            base_url=base_url or None,
            # Local servers (vLLM, Ollama, llama.cpp) take any key; the client insists on one.
            api_key=api_key or "not-needed",
            timeout=timeout_seconds,
            max_retries=0,  # we retry ourselves, visibly (shuttle.llm.retry)
            http_client=http_client or http_client_for(opts.http_client),
        )
        self._endpoint = _Endpoint(client, model)
        self._observer: RetryObserver | None = None

    # -- the LLM port ------------------------------------------------------------------------

    @property
    def model(self) -> str:
        return self._endpoint.model

    @property
    def name(self) -> str:
        return self._options.name or self._endpoint.model

    @property
    def supports_tools(self) -> bool:
        return self._options.abilities.tool_call

    @property
    def abilities(self) -> Abilities:
        return self._options.abilities

    @property
    def options(self) -> ModelOptions:
        return self._options

    def with_observer(self, observer: RetryObserver | None) -> OpenAIModel:
        view = object.__new__(OpenAIModel)
        view.__dict__.update(self.__dict__)
        view._observer = observer
        return view

    async def chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        tool_choice: ToolChoice | None = None,
        response_format: ResponseFormat | None = None,
    ) -> ChatResult:
        model = await self._resolved_model()
        body = self._request(model, messages, tools, tool_choice, response_format).body()
        started = time.monotonic()
        response: Any = await self._call(
            model,
            lambda: self._endpoint.client.post(
                "/chat/completions",
                cast_to=object,  # the parsed JSON (see shuttle.llm.wire)
                content=body,
                options={"headers": JSON_HEADERS},
            ),
        )
        choices = mapping(response).get("choices")
        if not isinstance(choices, list) or not choices:
            raise LLMError(f"{model}: the response has no choices: {_excerpt(response)}")
        choice = mapping(choices[0])
        message = mapping(choice.get("message"))
        calls = tool_calls_of(message)
        content = text_of(message.get("content"))
        usage = (
            usage_of(response["usage"])
            if response.get("usage") is not None
            else _estimated_usage(messages, content + "".join(c.arguments for c in calls))
        )
        return encodable(
            ChatResult(
                content=content,
                tool_calls=calls,
                reasoning_content=reasoning_of(message),
                finish_reason=text_of(choice.get("finish_reason")),
                usage=self._priced(usage),
                model=text_of(response.get("model")) or model,
                provider=self.provider,
                duration_ms=int((time.monotonic() - started) * 1000),
            )
        )

    def stream_chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        on_reasoning: ReasoningSink | None = None,
    ) -> OpenAIChatStream:
        stream = OpenAIChatStream(self, list(messages), list(tools))
        stream.on_reasoning = on_reasoning
        return stream

    async def close(self) -> None:
        await self._endpoint.client.close()

    # -- internals ---------------------------------------------------------------------------

    def _request(
        self,
        model: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        tool_choice: ToolChoice | None = None,
        response_format: ResponseFormat | None = None,
        stream: bool = False,
    ) -> ChatRequest:
        return ChatRequest(
            model=model,
            messages=messages,
            tools=tools,
            tool_choice=tool_choice,
            response_format=response_format,
            max_tokens=self._options.max_output_tokens,
            stream=stream,
        )

    def _priced(self, usage: TokenUsage) -> TokenUsage:
        return replace(usage, cost_usd=self._options.prices.cost(usage))

    async def _call(self, model: str, attempt: Callable[[], Awaitable[T]]) -> T:
        retrier = Retrier(self._options.retry, self._observer, model)
        try:
            return await retrier.call(attempt)
        except openai.OpenAIError as exc:
            if is_context_overflow(exc):
                raise ContextOverflowError(f"{model}: context window exceeded: {exc}") from exc
            unreachable = _connection_failure(exc)
            if unreachable is not None:
                base_url = self._endpoint.client.base_url
                raise LLMError(f"{model}: cannot reach {base_url}: {unreachable}") from exc
            raise LLMError(f"{model}: {exc}") from exc

    async def _resolved_model(self) -> str:
        """The configured model, else the first one the endpoint lists (its default)."""
        endpoint = self._endpoint
        if endpoint.model:
            return endpoint.model
        async with endpoint.lock:
            if not endpoint.model:
                try:
                    page = await endpoint.client.models.list()
                except openai.OpenAIError as exc:
                    raise LLMError(
                        f"no model configured and the endpoint did not list any ({exc}); "
                        "set SHUTTLE_MODEL"
                    ) from exc
                if not page.data:
                    raise LLMError("the endpoint lists no models; set SHUTTLE_MODEL")
                endpoint.model = page.data[0].id
        return endpoint.model

    async def _open_stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema]
    ) -> tuple[str, openai.AsyncStream[Any]]:
        model = await self._resolved_model()
        body = self._request(model, messages, tools, stream=True).body()
        stream = await self._call(
            model,
            lambda: self._endpoint.client.post(
                "/chat/completions",
                cast_to=object,  # each chunk as parsed JSON
                content=body,
                options={"headers": JSON_HEADERS},
                stream=True,
                stream_cls=openai.AsyncStream[object],
            ),
        )
        return model, stream


class OpenAIChatStream:
    """Yields answer text as it arrives; tool calls, reasoning and usage land in `result`.

    Only opening the stream is retried: once text has been handed out, a broken stream is
    an error rather than a silent restart that would repeat it.
    """

    def __init__(self, llm: OpenAIModel, messages: list[Message], tools: list[ToolSchema]) -> None:
        self.on_reasoning: ReasoningSink | None = None
        self._llm = llm
        self._messages = messages
        self._tools = tools
        self._result: ChatResult | None = None

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
        model, stream = await self._llm._open_stream(self._messages, self._tools)
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
            usage = _estimated_usage(self._messages, content)
        self._result = encodable(
            ChatResult(
                content=content,
                tool_calls=tool_calls,
                reasoning_content="".join(reasoning),
                finish_reason=finish_reason,
                usage=self._llm._priced(usage),
                model=model,
                provider=self._llm.provider,
                duration_ms=int((time.monotonic() - started) * 1000),
            )
        )


def _connection_failure(exc: BaseException) -> OSError | None:
    """The socket error under a failed call (refused, reset, unknown host), if that is what
    failed. The SDK says only "Connection error.", and on aiohttp a refused connection even
    comes back as "Request timed out."."""
    if not isinstance(exc, openai.APIConnectionError):
        return None
    found: OSError | None = None
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and not isinstance(cause, TimeoutError):
            found = cause  # the innermost wins: the system's own words
        cause = cause.__cause__ or cause.__context__
    return found


def _excerpt(response: Any) -> str:
    text = response if isinstance(response, str) else json.dumps(response, default=str)
    return text[:200]


def _estimated_usage(messages: Sequence[dict[str, Any]], output: str) -> TokenUsage:
    """For providers that report no usage: our own estimate, so budgets still move."""
    return TokenUsage(estimate_message_tokens(messages), estimate_tokens(output))
