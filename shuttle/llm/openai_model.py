"""An OpenAI-compatible endpoint through the official `openai` client.

Bodies are built by `shuttle.llm.wire` and sent with the client's `post` (flat per-call
overhead); retries are ours (`shuttle.llm.retry`) so that each one is visible to the run.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

import openai

from shuttle.llm.openai_stream import OpenAIChatStream
from shuttle.llm.protocol import (
    Abilities,
    ChatResult,
    ContextOverflowError,
    DeadlineExceeded,
    FallbackNotice,
    Feature,
    FeatureUnsupported,
    LLMError,
    Message,
    ReasoningSink,
    ResponseFormat,
    RetryObserver,
    ToolChoice,
    ToolSchema,
)
from shuttle.llm.provider_errors import connection_failure, is_context_overflow, refused_feature
from shuttle.llm.registry import Prices
from shuttle.llm.retry import Retrier, RetryPolicy
from shuttle.llm.tokens import estimate_message_tokens, estimate_tokens
from shuttle.llm.wire import (
    JSON_HEADERS,
    ChatRequest,
    encodable,
    mapping,
    reasoning_of,
    text_of,
    tool_calls_of,
    usage_of,
)
from shuttle.settings import DEFAULT_MAX_OUTPUT_TOKENS
from shuttle.usage import TokenUsage

T = TypeVar("T")

DEFAULT_ABILITIES = Abilities(tool_call=True, tool_choice=True, json_mode=True, streaming=True)
"""What an endpoint named only by OPENAI_BASE_URL is assumed to support."""


_REFUSED_BY_ENDPOINT: dict[tuple[str, str], set[Feature]] = {}
"""What each endpoint (base URL, model) refused, for the rest of the process."""


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
    context_size: int | None = None
    """The context window in tokens, when the models file gives it."""
    stated: frozenset[str] = frozenset()
    """The abilities the models file states: what the endpoint is found to refuse does not
    change them."""
    max_output_tokens: int | None = DEFAULT_MAX_OUTPUT_TOKENS
    """Sent as `max_tokens` with every call; None sends none (the endpoint's own limit)."""
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
        self._deadline: float | None = None

    # -- the LLM port ------------------------------------------------------------------------

    @property
    def model(self) -> str:
        return self._endpoint.model

    @property
    def name(self) -> str:
        return self._options.name or self._endpoint.model

    @property
    def supports_tools(self) -> bool:
        return self.abilities.tool_call

    @property
    def abilities(self) -> Abilities:
        """The configured abilities, less what the endpoint refused (unless stated)."""
        abilities = self._options.abilities
        refused = _REFUSED_BY_ENDPOINT.get(self._endpoint_key())
        if not refused:
            return abilities
        stated = self._options.stated
        if "tools" in refused and "tool_call" not in stated:
            abilities = replace(abilities, tool_call=False, tool_choice=False)
        if "response_format" in refused and "json_mode" not in stated:
            abilities = replace(abilities, json_mode=False)
        return abilities

    @property
    def context_size(self) -> int | None:
        return self._options.context_size

    @property
    def options(self) -> ModelOptions:
        return self._options

    def with_observer(self, observer: RetryObserver | None) -> OpenAIModel:
        view = object.__new__(OpenAIModel)
        view.__dict__.update(self.__dict__)
        view._observer = observer
        return view

    def with_deadline(self, deadline: float | None) -> OpenAIModel:
        view = object.__new__(OpenAIModel)
        view.__dict__.update(self.__dict__)
        view._deadline = deadline
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
        sent = _features(tools, response_format)
        try:
            response: Any = await self._call(
                model,
                lambda: self._endpoint.client.post(
                    "/chat/completions",
                    cast_to=object,  # the parsed JSON (see shuttle.llm.wire)
                    content=body,
                    options={"headers": JSON_HEADERS, "timeout": self._attempt_timeout()},
                ),
                sent,
            )
        except FeatureUnsupported as refused:
            if refused.feature != "response_format":
                raise
            # The same call as plain text: every caller of JSON mode parses text too.
            await self._fell_back(
                FallbackNotice(model, "response_format", "plain_text", str(refused))
            )
            return await self.chat(messages, tools, tool_choice=tool_choice)
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
                usage=self.priced(usage),
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

    @staticmethod
    def estimated_usage(messages: Sequence[Message], output: str) -> TokenUsage:
        """For providers that report no usage: our own estimate, so budgets still move."""
        return _estimated_usage(messages, output)

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

    def priced(self, usage: TokenUsage) -> TokenUsage:
        return replace(usage, cost_usd=self._options.prices.cost(usage))

    def _attempt_timeout(self) -> float:
        """The call's timeout, clipped to the time left before the deadline."""
        timeout = self._options.timeout_seconds
        if self._deadline is None:
            return timeout
        return max(0.001, min(timeout, self._deadline - time.monotonic()))

    def _endpoint_key(self) -> tuple[str, str]:
        return (str(self._endpoint.client.base_url), self._endpoint.model)

    async def _fell_back(self, notice: FallbackNotice) -> None:
        if self._observer is not None:
            await self._observer.on_fallback(notice)

    def _refused(self, feature: Feature) -> bool:
        """Remember that the endpoint refused `feature`; False when the models file states
        the matching ability (what it says wins)."""
        if _ABILITY_OF[feature] in self._options.stated:
            return False
        _REFUSED_BY_ENDPOINT.setdefault(self._endpoint_key(), set()).add(feature)
        return True

    async def _call(
        self,
        model: str,
        attempt: Callable[[], Awaitable[T]],
        sent: frozenset[Feature] = frozenset(),
    ) -> T:
        if self._deadline is not None and time.monotonic() >= self._deadline:
            raise DeadlineExceeded(f"{model}: the deadline passed before the call")
        retrier = Retrier(self._options.retry, self._observer, model, self._deadline)
        try:
            return await retrier.call(attempt)
        except openai.OpenAIError as exc:
            if retrier.out_of_time:
                raise DeadlineExceeded(f"{model}: out of time ({exc})") from exc
            feature = refused_feature(exc, sent)
            if feature is not None and self._refused(feature):
                raise FeatureUnsupported(feature, f"{model}: {exc}") from exc
            if is_context_overflow(exc):
                raise ContextOverflowError(f"{model}: context window exceeded: {exc}") from exc
            unreachable = connection_failure(exc)
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

    async def open_stream(
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
                options={"headers": JSON_HEADERS, "timeout": self._attempt_timeout()},
                stream=True,
                stream_cls=openai.AsyncStream[object],
            ),
            _features(tools, None),
        )
        return model, stream


_ABILITY_OF: dict[Feature, str] = {"tools": "tool_call", "response_format": "json_mode"}


def _features(
    tools: Sequence[ToolSchema], response_format: ResponseFormat | None
) -> frozenset[Feature]:
    sent: set[Feature] = set()
    if tools:
        sent.add("tools")
    if response_format is not None:
        sent.add("response_format")
    return frozenset(sent)


def _excerpt(response: Any) -> str:
    text = response if isinstance(response, str) else json.dumps(response, default=str)
    return text[:200]


def _estimated_usage(messages: Sequence[dict[str, Any]], output: str) -> TokenUsage:
    """For providers that report no usage: our own estimate, so budgets still move."""
    return TokenUsage(estimate_message_tokens(messages), estimate_tokens(output))
