"""Request bodies and response parsing for OpenAI-compatible chat completions.

The SDK's `chat.completions.create` walks every message through its TypedDict transform on
each call, so client time grows with the history (12 ms at 50 messages, 40 ms at 200 in
bench/suites/llm_overhead.py). We build the JSON body ourselves — one orjson call — and hand the
bytes to the same client's `post`, which keeps its transport, auth and errors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from shuttle.llm.protocol import (
    ChatResult,
    Message,
    ResponseFormat,
    ToolCallRequest,
    ToolChoice,
    ToolSchema,
)
from shuttle.usage import TokenUsage
from shuttle.utf8 import ensure_utf8, json_bytes

JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: Sequence[Message]
    tools: Sequence[ToolSchema] = ()
    tool_choice: ToolChoice | None = None
    response_format: ResponseFormat | None = None
    max_tokens: int | None = None
    stream: bool = False

    def body(self) -> bytes:
        payload: dict[str, Any] = {"model": self.model, "messages": self.messages}
        if self.tools:
            payload["tools"] = self.tools
            if self.tool_choice is not None:
                payload["tool_choice"] = self.tool_choice
        if self.response_format is not None:
            payload["response_format"] = self.response_format
        if self.max_tokens is not None:
            payload["max_tokens"] = self.max_tokens
        if self.stream:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        # orjson: a tenth of json.dumps's time, 0.009 against 0.105 ms for the 101 messages of
        # a 50-round run, paid on every call.
        return json_bytes(payload)


# Responses are read as parsed JSON (the client's `post` with `cast_to=object`): building the
# SDK's response models took a sixth of a call's client CPU, and their fields are not
# validated anyway. Every reader below takes what is there and ignores what is malformed.


def mapping(value: Any) -> Mapping[str, Any]:
    """`value` when it is a JSON object, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def text_of(value: Any) -> str:
    """A string field; absent or not a string reads as ""."""
    return value if isinstance(value, str) else ""


def arguments_of(value: Any) -> str:
    """Tool-call arguments as JSON text; some providers send an object instead."""
    if isinstance(value, str):
        return value
    return "" if value is None else json.dumps(value, ensure_ascii=False)


def usage_of(raw: Any) -> TokenUsage:
    """Token counts from a usage object (prompt, completion, cached prompt tokens)."""
    usage = mapping(raw)
    details = mapping(usage.get("prompt_tokens_details"))
    return TokenUsage(
        input_tokens=_count(usage.get("prompt_tokens")),
        output_tokens=_count(usage.get("completion_tokens")),
        cached_tokens=_count(details.get("cached_tokens")),
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def encodable(result: ChatResult) -> ChatResult:
    """`result` with every text valid UTF-8: a lone surrogate the endpoint escaped would
    otherwise fail the run's events and its next request (shuttle/utf8.py)."""
    return replace(
        result,
        content=ensure_utf8(result.content),
        tool_calls=tuple(
            ToolCallRequest(ensure_utf8(c.id), ensure_utf8(c.name), ensure_utf8(c.arguments))
            for c in result.tool_calls
        ),
        reasoning_content=ensure_utf8(result.reasoning_content),
        finish_reason=ensure_utf8(result.finish_reason),
        model=ensure_utf8(result.model),
    )


def reasoning_of(message: Mapping[str, Any]) -> str:
    """`reasoning_content` (DeepSeek, vLLM, …) or `reasoning` (some OpenRouter models)."""
    for name in ("reasoning_content", "reasoning"):
        value = message.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def tool_calls_of(message: Mapping[str, Any]) -> tuple[ToolCallRequest, ...]:
    """The function calls of a whole (not streamed) message."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return ()
    found = []
    for number, raw in enumerate(calls):
        call = mapping(raw)
        function = mapping(call.get("function"))
        name = text_of(function.get("name"))
        if call.get("type", "function") != "function" or not name:
            continue
        found.append(
            ToolCallRequest(
                id=text_of(call.get("id")) or f"call_{number}",
                name=name,
                arguments=arguments_of(function.get("arguments")),
            )
        )
    return tuple(found)


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ToolCallAccumulator:
    """Joins streamed tool-call deltas into whole calls.

    Deltas are grouped by `index`. Some providers send every call with index 0; a delta that
    carries a new `id` (or a new function name after a finished one) at an index already in
    use therefore starts a new call instead of being glued onto the previous one.
    """

    def __init__(self) -> None:
        self._calls: list[_PartialCall] = []
        self._by_index: dict[int, _PartialCall] = {}

    def add(self, delta: Mapping[str, Any]) -> None:
        index = delta.get("index")
        index = index if isinstance(index, int) else len(self._calls)
        call_id = text_of(delta.get("id"))
        function = mapping(delta.get("function"))
        name = text_of(function.get("name"))
        arguments = arguments_of(function.get("arguments"))
        current = self._by_index.get(index)
        if current is None or _starts_new_call(current, call_id, name):
            current = _PartialCall()
            self._calls.append(current)
            self._by_index[index] = current
        if call_id:
            current.id = call_id
        if name:
            current.name += name
        if arguments:
            current.arguments.append(arguments)

    def calls(self) -> tuple[ToolCallRequest, ...]:
        return tuple(
            ToolCallRequest(
                id=call.id or f"call_{number}", name=call.name, arguments="".join(call.arguments)
            )
            for number, call in enumerate(self._calls)
            if call.name
        )


def _starts_new_call(current: _PartialCall, call_id: str, name: str) -> bool:
    if call_id and current.id and call_id != current.id:
        return True
    # No id on the delta, but a function name arriving after the previous call's arguments.
    return bool(name and not call_id and current.name and current.arguments)
