"""The model every chaos run talks to: a few calculator calls, then a streamed answer.

Stateless per request (the step is the number of tool results the run has sent back), so
any number of concurrent runs share one scripted server, and a retried request gets the
same reply as the first attempt.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.support.scripted_openai import Reply, error, text, tool_call

ANSWER_WORDS = 40


@dataclass
class ChaosModel:
    """`tool_steps` calculator calls per run, then a final answer and its synthesis."""

    tool_steps: int = 4
    rate_limit_every_other_call: bool = False
    """Answer the first attempt of every call with HTTP 429, the retry normally."""
    calls: Counter[str] = field(default_factory=Counter)
    rate_limited: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        question = next(str(m["content"]) for m in messages if m["role"] == "user")
        done = sum(1 for m in messages if m["role"] == "tool")
        if self._should_refuse(f"{question}|{done}|{len(messages)}|{bool(body.get('stream'))}"):
            return error(429, "rate limited", headers={"retry-after-ms": "20"})
        if body.get("stream"):
            words = [f"w{i}" for i in range(ANSWER_WORDS)]
            return text(f"Answer to {question}: " + " ".join(words) + ".")
        if done < self.tool_steps:
            return tool_call(
                "calculator", {"expression": f"{done + 1}*7"}, call_id=f"call_{done + 1}"
            )
        return text(f"Done after {done} calculations.")

    def _should_refuse(self, call_key: str) -> bool:
        with self._lock:
            self.calls[call_key] += 1
            if self.rate_limit_every_other_call and self.calls[call_key] == 1:
                self.rate_limited += 1
                return True
            return False
