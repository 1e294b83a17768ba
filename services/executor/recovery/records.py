"""An event as the fold reads it back from the log, and what its payloads stand for."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shuttle.llm.protocol import ChatResult, ToolCallRequest
from shuttle.tool_calls import Artifact, ToolOutcome
from shuttle.usage import TokenUsage


class RecoveryError(Exception):
    """The log does not read as a run this executor could have written: it cannot be
    taken over (the message names the event)."""


@dataclass(frozen=True)
class Recorded:
    seq: int
    type: str
    agent_id: str = ""
    payload: Mapping[str, Any] = field(default_factory=dict)
    timestamp: float = 0.0
    """Seconds since the epoch, as the events service stamped it."""

    def get(self, key: str, default: Any = None) -> Any:
        return self.payload.get(key, default)


def usage_of(payload: Mapping[str, Any]) -> TokenUsage:
    """An LLM_OUTPUT's usage."""
    usage = payload.get("usage") or {}
    return TokenUsage(
        input_tokens=int(usage.get("input_tokens", 0)),
        output_tokens=int(usage.get("output_tokens", 0)),
        cached_tokens=int(usage.get("cached_tokens", 0)),
        cost_usd=float(payload.get("cost_usd", 0.0)),
        total_tokens=int(usage.get("total_tokens", -1)),
    )


def chat_result(payload: Mapping[str, Any]) -> ChatResult:
    """An LLM_OUTPUT's model response (its reasoning text is not kept on the log)."""
    return ChatResult(
        content=str(payload.get("output") or ""),
        tool_calls=tuple(
            ToolCallRequest(str(c.get("id", "")), str(c["name"]), str(c.get("arguments", "")))
            for c in payload.get("tool_calls") or ()
        ),
        finish_reason=str(payload.get("finish_reason") or ""),
        usage=usage_of(payload),
        model=str(payload.get("model") or ""),
        provider=str(payload.get("provider") or ""),
        duration_ms=int(payload.get("duration_ms") or 0),
    )


def outcome_of(payload: Mapping[str, Any]) -> ToolOutcome:
    """A TOOL_OBSERVATION's outcome (read with full results)."""
    return ToolOutcome(
        observation=str(payload.get("result") or ""),
        error=str(payload.get("error") or ""),
        blocked=bool(payload.get("blocked")),
        block_reason=str(payload.get("block_reason") or ""),
        truncated=bool(payload.get("tool_truncated")),
        duration_ms=int(payload.get("duration_ms") or 0),
        artifacts=tuple(
            Artifact(
                a["name"], a.get("mime_type", ""), int(a.get("size_bytes", 0)), a.get("uri", "")
            )
            for a in payload.get("artifacts") or ()
        ),
        call_id=str(payload.get("call_id") or ""),
    )


def monotonic_since(wall: float) -> float:
    """The monotonic clock's reading at `wall` (seconds since the epoch), for durations of
    a run that began on another replica."""
    return time.monotonic() - max(0.0, time.time() - wall)
