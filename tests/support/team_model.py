"""A scripted model for DAG runs: it answers the planner's plan and analysis calls, each
step agent's ReAct calls (by the step id in its prompt) and the final streamed synthesis.

`TimedScriptedOpenAI` records when each request arrived and when its reply left, so a test
can check that two steps' calls overlapped (ordering of instants, never a duration); it can
also hold the replies to one kind of call until the test lets them go, without holding up
the other calls.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from services.planner.analysis import ANALYST_PROMPT
from services.planner.planning import PLANNER_PROMPT
from tests.support.scripted_openai import Reply, ScriptedOpenAI, text, tool_call

HOLD_LIMIT_SECONDS = 60
"""A held reply goes out after this long even if the test never lets it go."""
STEP_ID = re.compile(r"Your step \((\S+)\):")

StepReply = Reply | Callable[[dict[str, Any]], Reply]


def plan(*steps: tuple[str, str, list[str]]) -> dict[str, Any]:
    return {"steps": [{"id": i, "task": t, "dependencies": d} for i, t, d in steps]}


def verdict(achieved: bool, confidence: float, answer: str = "draft") -> dict[str, Any]:
    return {
        "achieved": achieved,
        "confidence": confidence,
        "answer": answer,
        "reasoning": f"confidence {confidence}",
    }


def usage(total_tokens: int) -> dict[str, int]:
    """A reply's usage object totalling `total_tokens`."""
    output = min(7, total_tokens)
    return {
        "prompt_tokens": total_tokens - output,
        "completion_tokens": output,
        "total_tokens": total_tokens,
    }


def label(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    system = str(messages[0].get("content") or "") if messages else ""
    if body.get("stream"):
        return "synthesis"
    if system.startswith(PLANNER_PROMPT):
        return "plan"
    if system.startswith(ANALYST_PROMPT):
        return "analysis"
    for message in messages:
        found = STEP_ID.search(str(message.get("content") or ""))
        if found:
            return found.group(1)
    return "other"


def structured(body: dict[str, Any], name: str, value: dict[str, Any]) -> Reply:
    """A function call when the planner offers one, else the JSON as text (its later levels)."""
    if body.get("tools"):
        return tool_call(name, value)
    return text(json.dumps(value))


@dataclass
class TeamModel:
    plans: list[dict[str, Any]]
    verdicts: list[dict[str, Any]] = field(default_factory=lambda: [verdict(True, 0.95)])
    steps: dict[str, list[StepReply]] = field(default_factory=dict)
    synthesis: str = "The team's final answer."
    tokens_per_call: int = 0
    """Usage every non-streamed reply reports unless scripted otherwise (0: the server's)."""
    calls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Reply:
        kind = label(body)
        with self._lock:
            seen = self.calls.setdefault(kind, [])
            seen.append(body)
            number = len(seen)
            queue = self.steps.get(kind)
            scripted = queue.pop(0) if queue else None
        if kind == "synthesis":
            return text(self.synthesis)
        reply = self._reply(body, kind, number, scripted)
        if self.tokens_per_call and reply.usage is None:
            reply = replace(reply, usage=usage(self.tokens_per_call))
        return reply

    def _reply(
        self, body: dict[str, Any], kind: str, number: int, scripted: StepReply | None
    ) -> Reply:
        if kind == "plan":
            return structured(body, "submit_plan", self.plans[min(number, len(self.plans)) - 1])
        if kind == "analysis":
            value = self.verdicts[min(number, len(self.verdicts)) - 1]
            return structured(body, "submit_analysis", value)
        if scripted is None:
            return text(f"result of {kind}")
        return scripted(body) if callable(scripted) else scripted

    def prompt_text(self, kind: str, n: int = 1) -> str:
        """Everything the Nth call of `kind` saw, as one string."""
        return "\n".join(str(m.get("content") or "") for m in self.calls[kind][n - 1]["messages"])


class TimedScriptedOpenAI(ScriptedOpenAI):
    def __init__(self, handler: TeamModel) -> None:
        super().__init__(handler)
        self.intervals: list[tuple[str, float, float]] = []
        self._arrivals: dict[str, threading.Event] = {}
        self._holds: dict[str, threading.Event] = {}
        self._events_lock = threading.Lock()

    def arrival(self, kind: str) -> threading.Event:
        """Set once a call of `kind` has arrived (before any hold)."""
        with self._events_lock:
            return self._arrivals.setdefault(kind, threading.Event())

    def hold(self, kind: str, until: threading.Event) -> None:
        """Keep the replies to calls of `kind` waiting until `until` is set."""
        self._holds[kind] = until

    async def _completions(self, request: Request) -> Response:
        arrived = time.monotonic()
        body = await request.json()
        kind = label(body)
        self.arrival(kind).set()
        hold = self._holds.get(kind)
        if hold is not None:
            # In a worker thread: the server's loop goes on answering the other calls.
            await asyncio.to_thread(hold.wait, HOLD_LIMIT_SECONDS)
        response = await super()._completions(request)
        self.intervals.append((kind, arrived, time.monotonic()))
        return response

    def interval(self, kind: str) -> tuple[float, float]:
        return next((a, b) for k, a, b in self.intervals if k == kind)
