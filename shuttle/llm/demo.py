"""The offline demo model: deterministic, no network, and honest about being a demo.

It knows one trick: arithmetic through the `calculator` tool. Anything else gets a plain
statement of what it cannot do and how to configure a real model.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence

from shuttle.llm.protocol import (
    Abilities,
    ChatResult,
    Message,
    ReasoningSink,
    ResponseFormat,
    RetryObserver,
    ToolCallRequest,
    ToolChoice,
    ToolSchema,
)
from shuttle.llm.tokens import estimate_tokens
from shuttle.usage import TokenUsage

DEMO_MODEL_NAME = "shuttle-demo"
DEMO_LABEL = "[demo model]"

# A run of numbers joined by arithmetic operators, e.g. "12*7", "(3 + 4) ** 2", "10 / 4".
_EXPRESSION = re.compile(r"(?:(?<![\w)])-)?[\d.(][\d.\s()+\-*/%^]*[\d)]")
_HAS_OPERATOR = re.compile(r"[\d)]\s*(\*\*|//|[-+*/%^])\s*-?[\d.(]")
# The synthesis trace line the engine writes for a finished calculator call.
_CALCULATOR_STEP = re.compile(r"calculator\((\{.*\})\) (?:→|->) (.+)")

CANNOT_HELP = (
    f"{DEMO_LABEL} I am Shuttle's offline demo model. I can only do arithmetic, using the "
    'calculator tool (try "What is 12*7?"). I cannot answer this question. To use a real '
    "model, set OPENAI_BASE_URL and OPENAI_API_KEY (any OpenAI-compatible server) and restart."
)


def find_expression(text: str) -> str | None:
    """The first arithmetic expression in `text`, with `^` read as a power."""
    for match in _EXPRESSION.finditer(text):
        candidate = match.group(0).strip()
        if _HAS_OPERATOR.search(candidate):
            return candidate.replace("^", "**")
    return None


def _estimate_tokens(text: str) -> int:
    return max(1, estimate_tokens(text))


class DemoModel:
    """Implements the `LLM` port without any network access."""

    model = DEMO_MODEL_NAME
    provider = "demo"
    supports_tools = True
    abilities = Abilities(tool_call=True, tool_choice=False, json_mode=False, streaming=True)
    context_size: int | None = None

    def with_observer(self, observer: RetryObserver | None) -> DemoModel:
        return self  # nothing to retry: no network

    def with_deadline(self, deadline: float | None) -> DemoModel:
        return self  # it answers at once

    async def chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        tool_choice: ToolChoice | None = None,
        response_format: ResponseFormat | None = None,
    ) -> ChatResult:
        prompt_tokens = sum(_estimate_tokens(str(m.get("content") or "")) for m in messages)
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            content = f"{DEMO_LABEL} The calculator returned {last.get('content', '')}."
            return self._result(content, prompt_tokens)
        question = _last_user_text(messages)
        expression = find_expression(question)
        tool_names = {t.get("function", {}).get("name") for t in tools}
        if expression and "calculator" in tool_names:
            call = ToolCallRequest(
                id=f"call_demo_{len(messages)}",
                name="calculator",
                arguments=json.dumps({"expression": expression}),
            )
            return self._result("", prompt_tokens, (call,), "tool_calls")
        return self._result(CANNOT_HELP, prompt_tokens)

    def stream_chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        on_reasoning: ReasoningSink | None = None,
    ) -> DemoChatStream:
        """The demo model does not think aloud: `on_reasoning` is never called."""
        return DemoChatStream(_synthesize(_last_user_text(messages)))

    def _result(
        self,
        content: str,
        prompt_tokens: int,
        calls: tuple[ToolCallRequest, ...] = (),
        finish_reason: str = "stop",
    ) -> ChatResult:
        usage = TokenUsage(prompt_tokens, _estimate_tokens(content or str(calls)))
        return ChatResult(
            content=content,
            tool_calls=calls,
            finish_reason=finish_reason,
            usage=usage,
            model=self.model,
            provider=self.provider,
        )


class DemoChatStream:
    """Streams a fixed answer word by word, like a real model would token by token."""

    def __init__(self, answer: str) -> None:
        self._answer = answer
        self._done = False

    @property
    def result(self) -> ChatResult:
        if not self._done:
            raise RuntimeError("the stream has not been read to its end")
        return ChatResult(
            content=self._answer,
            finish_reason="stop",
            usage=TokenUsage(0, _estimate_tokens(self._answer)),
            model=DEMO_MODEL_NAME,
            provider="demo",
        )

    async def __aiter__(self) -> AsyncIterator[str]:
        for word in re.findall(r"\S+\s*", self._answer):
            yield word
        self._done = True


def _last_user_text(messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return str(message.get("content") or "")
    return ""


def _synthesize(trace: str) -> str:
    steps = _CALCULATOR_STEP.findall(trace)
    if not steps:
        return CANNOT_HELP
    arguments, result = steps[-1]
    try:
        expression = json.loads(arguments).get("expression", "")
    except (ValueError, AttributeError):
        expression = ""
    if result.startswith("error"):
        return f"{DEMO_LABEL} The calculator could not work that out: {result}"
    shown = f"{expression} = {result}" if expression else result
    return f"{DEMO_LABEL} {shown}"
