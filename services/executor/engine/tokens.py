"""Offline token estimates for the context guard (no tokenizer download at run time): the
LLM layer's heuristic, plus what the offered tool schemas take."""

from __future__ import annotations

import json
from collections.abc import Sequence

from services.executor.engine.conversation import Entry
from shuttle.llm.protocol import Message, ToolSchema
from shuttle.llm.tokens import estimate_message_tokens, estimate_tokens


def estimate_messages(messages: Sequence[Message], tools: Sequence[ToolSchema] = ()) -> int:
    return estimate_tools(tools) + estimate_message_tokens(messages)


def estimate_tools(tools: Sequence[ToolSchema]) -> int:
    """What the offered tool schemas take of the prompt."""
    return estimate_tokens(json.dumps(list(tools))) if tools else 0


def estimate_entries(entries: Sequence[Entry], tool_tokens: int) -> int:
    """The same estimate as `estimate_messages`, from the entries' own cached counts."""
    return tool_tokens + sum(entry.tokens for entry in entries)
