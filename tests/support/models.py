"""Scripted model behaviours shared by tests and benchmarks."""

from __future__ import annotations

import re
import threading
from typing import Any

from tests.support.scripted_openai import Reply, error, text, tool_call


def arithmetic_model(body: dict[str, Any]) -> Reply:
    """Calls the calculator for the question's expression, then answers from its result."""
    messages = body["messages"]
    if body.get("stream"):
        found = re.search(r"calculator\(.*\) → (\S+)", messages[-1]["content"])
        return text(f"The answer is {found.group(1) if found else 'unknown'}.")
    if messages[-1]["role"] == "tool":
        return text(f"It is {messages[-1]['content']}.")
    question = next(m["content"] for m in messages if m["role"] == "user")
    expression = re.search(r"\d+\s*[-+*/]\s*\d+", question)
    if expression is None:
        return text("I only do arithmetic.")
    return tool_call("calculator", {"expression": expression.group(0)}, call_id="call_calc")


class HeldLoopCall:
    """Answers like `arithmetic_model`, except that the executor's first tool-loop call after
    `arm()` is held until `release()`: the run is mid-model-call for as long as a test needs
    (to kill its executor, say). The hold blocks the scripted server, so release before the
    next call is due."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self._release = threading.Event()
        self._armed = False

    def arm(self) -> None:
        self.held, self._release, self._armed = threading.Event(), threading.Event(), True

    def release(self) -> None:
        self._release.set()

    def __call__(self, body: dict[str, Any]) -> Reply:
        if "tools" in body and self._armed:
            self._armed = False
            release = self._release
            self.held.set()
            release.wait(120)
            return error(503, "released by the test")
        return arithmetic_model(body)
