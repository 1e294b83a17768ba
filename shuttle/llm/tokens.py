"""Token estimates without any tokenizer download.

BPE tokenizers need vocabulary files that are fetched at run time (tiktoken) or are large
model-specific assets; Shuttle must run offline and talks to many model families, so it uses
a character-class heuristic instead: about four ASCII characters per token, and one token
per non-ASCII character (CJK text runs close to that). It is meant for budgets and context
guards, where a rough figure that errs towards more tokens is what matters.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds per message (role markers, separators)."""

_ASCII_CHARS_PER_TOKEN = 4.0


def estimate_tokens(text: str) -> int:
    """About how many tokens `text` is; 0 only for the empty string."""
    if not text:
        return 0
    # Counted in C: the guard estimates the whole conversation before every model call.
    ascii_chars = len(text) if text.isascii() else len(text.encode("ascii", "ignore"))
    wide = len(text) - ascii_chars
    return max(1, round(ascii_chars / _ASCII_CHARS_PER_TOKEN) + wide)


def estimate_message_tokens(messages: Iterable[dict[str, Any]]) -> int:
    """Estimated prompt size of a chat request, tool calls included."""
    total = 0
    for message in messages:
        total += MESSAGE_OVERHEAD + estimate_tokens(_text_of(message.get("content")))
        calls = message.get("tool_calls")
        if calls:
            total += estimate_tokens(json.dumps(calls, ensure_ascii=False))
    return total


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multi-part content: count the text parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)
