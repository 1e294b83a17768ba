"""Scripted model behaviours shared by tests and benchmarks."""

from __future__ import annotations

import re
from typing import Any

from tests.support.scripted_openai import Reply, text, tool_call


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
