"""Offline token estimates for the context guard (no tokenizer download at run time): the
LLM layer's heuristic, plus what the offered tool schemas take."""

from __future__ import annotations

import json
from collections.abc import Sequence

from shuttle.llm.protocol import Message, ToolSchema
from shuttle.llm.tokens import estimate_message_tokens, estimate_tokens


def estimate_messages(messages: Sequence[Message], tools: Sequence[ToolSchema] = ()) -> int:
    tool_tokens = estimate_tokens(json.dumps(list(tools))) if tools else 0
    return tool_tokens + estimate_message_tokens(messages)
