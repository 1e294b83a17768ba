"""A scripted agent model that speaks either mode: the same script drives native function
calling (when the request offers `tools`) and JSON actions (when it does not).

Loop calls take the next step of the script; compaction summaries and the streamed answer
synthesis get canned replies. Every call is recorded by kind, so a test can look at exactly
what the Nth loop call saw.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.executor.policies.context_guard import COMPACT_PROMPT
from tests.support.scripted_openai import Reply, error, text


@dataclass
class Step:
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    answer: str | None = None
    raw: str | None = None
    """Content sent as is (e.g. something that is not a JSON action)."""
    reasoning_content: str = ""
    during: Callable[[], None] | None = None
    """Runs while the model "thinks", before the reply leaves (e.g. send an interrupt)."""


def call(name: str, **args: Any) -> Step:
    return Step(calls=[(name, args)])


def calc(expression: str) -> Step:
    return call("calculator", expression=expression)


def answer(content: str) -> Step:
    return Step(answer=content)


def raw(content: str) -> Step:
    return Step(raw=content)


class AgentModel:
    def __init__(
        self,
        *steps: Step,
        synthesis: str = "The final answer.",
        summary: str | None = "Earlier: the agent computed several sums.",
        default: Step | None = None,
    ) -> None:
        self.steps = list(steps)
        self.synthesis = synthesis
        self.summary = summary
        self.default = default or answer("Done.")
        self.loop_calls: list[dict[str, Any]] = []
        self.summary_calls: list[dict[str, Any]] = []
        self.synthesis_calls: list[dict[str, Any]] = []
        self.synthesising = threading.Event()
        """Set once the answer synthesis has been asked for."""
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        if body.get("stream"):
            self.synthesis_calls.append(body)
            self.synthesising.set()
            return text(self.synthesis)
        if str(body["messages"][0].get("content", "")).startswith(COMPACT_PROMPT):
            self.summary_calls.append(body)
            return text(self.summary) if self.summary is not None else error(500, "no summary")
        with self._lock:
            self.loop_calls.append(body)
            number = len(self.loop_calls)
            step = self.steps.pop(0) if self.steps else self.default
        if step.during is not None:
            step.during()
        return self.reply(step, number, native="tools" in body)

    @staticmethod
    def reply(step: Step, number: int, native: bool) -> Reply:
        if step.raw is not None:
            return Reply(content=step.raw, reasoning=step.reasoning_content)
        if step.answer is not None:
            if native:
                return Reply(content=step.answer, reasoning=step.reasoning_content)
            final = {"type": "final_answer", "reasoning": "", "answer": step.answer}
            return Reply(content=json.dumps(final), reasoning=step.reasoning_content)
        if native:
            calls = [(f"call_{number}_{i}", n, a) for i, (n, a) in enumerate(step.calls)]
            return Reply(tool_calls=calls, reasoning=step.reasoning_content)
        ((name, args),) = step.calls  # JSON mode: one tool per reply
        action: dict[str, Any] = {
            "type": "tool_call",
            "reasoning": "",
            "tool_name": name,
            "tool_args": args,
        }
        return Reply(content=json.dumps(action), reasoning=step.reasoning_content)

    def saw(self, n: int) -> list[dict[str, Any]]:
        """The messages of the Nth loop call (1-based)."""
        return list(self.loop_calls[n - 1]["messages"])
