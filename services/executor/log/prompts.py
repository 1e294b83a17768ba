"""What an LLM_PROMPT event says about a model call before it is made: the model, the
prompt's size, the call's limits, and the newest message with anything resembling a
credential masked. Built for every model call, so it reads the conversation once and copies
none of it but the clipped message."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shuttle.llm.protocol import LLM, Message

SANITIZED_PROMPT_CHARS = 500
"""How much of the newest message the event shows."""

_SECRETS = re.compile(
    r"(?i)\b(?:sk|pk|rk|ghp|gho|xox[abp])[-_][A-Za-z0-9_-]{8,}"
    r"|\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"
    r"|\b(?:api[_-]?key|token|secret|password)\b(\s*[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"
)


@dataclass(frozen=True)
class PromptSettings:
    """The call's settings as the model sends them; None where the provider's default
    applies (nothing is sent for it)."""

    model: str
    max_tokens: int | None
    temperature: float | None

    @classmethod
    def of(cls, llm: LLM) -> PromptSettings:
        # Models built from the configuration carry their options; any other model (a
        # test's, a provider's own) is described by its name alone.
        options = getattr(llm, "options", None)
        max_tokens = getattr(options, "max_output_tokens", None)
        temperature = getattr(options, "temperature", None)
        return cls(
            llm.model,
            max_tokens if isinstance(max_tokens, int) else None,
            temperature if isinstance(temperature, int | float) else None,
        )


def sanitize(text: str, limit: int = SANITIZED_PROMPT_CHARS) -> str:
    """`text` clipped to `limit` characters, credential-like values masked."""
    clipped = text[:limit]
    masked = _SECRETS.sub(_mask, clipped)
    return masked + ("…" if len(text) > limit else "")


def _mask(found: re.Match[str]) -> str:
    separator = found.group(1)
    if separator is None:
        return "[redacted]"
    name = found.group(0)[: found.start(1) - found.start(0)]
    return f"{name}{separator}[redacted]"


def prompt_payload(
    settings: PromptSettings, messages: Sequence[Message], phase: str
) -> dict[str, Any]:
    """The LLM_PROMPT payload of a call sending `messages`."""
    length = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            length += len(content)
    newest = messages[-1].get("content") if messages else ""
    return {
        "model": settings.model,
        "prompt_length": length,
        "max_tokens": settings.max_tokens,
        "temperature": settings.temperature,
        "sanitized_prompt": sanitize(newest if isinstance(newest, str) else ""),
        "messages": len(messages),
        "phase": phase,
    }
