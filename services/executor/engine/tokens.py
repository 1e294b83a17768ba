"""Offline token estimates: no tokenizer download at run time (a models registry may replace
this with the model's own count)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from shuttle.llm.protocol import Message, ToolSchema

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_text(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def estimate_message(message: Message) -> int:
    tokens = MESSAGE_OVERHEAD_TOKENS + estimate_text(str(message.get("content") or ""))
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        tokens += estimate_text(str(function.get("name", ""))) + estimate_text(
            str(function.get("arguments", ""))
        )
    return tokens


def estimate_messages(messages: Sequence[Message], tools: Sequence[ToolSchema] = ()) -> int:
    tool_tokens = estimate_text(json.dumps(list(tools))) if tools else 0
    return tool_tokens + sum(estimate_message(m) for m in messages)
