"""The model of the takeover tests: deterministic, stateless per request, and able to hold a
chosen call in flight while the test kills the executor waiting on it.

A ReAct run appends a line to a workspace file (`file_ops`), records an effect with the
test's tool provider (`record_effect`, or `approved_effect` behind a human approval when the
question asks for one), computes 6*7, then answers. A COMPLEX run plans steps a and b (each
appends its line) and c after both (records an effect). Every streamed answer echoes what the
tools returned, so an effect applied twice, or an observation lost, changes the answer; the
answer never names the question or a call id, so runs of one script all answer alike.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from tests.support.gate import Gate
from tests.support.scripted_openai import Reply, ScriptedOpenAI, text, tool_call
from tests.support.team_model import label, plan, structured, verdict

EFFECTS_FILE = "effects.txt"
PROVIDER_TOOL = "record_effect"
APPROVED_TOOL = "approved_effect"
APPROVAL_WORD = "approval"
"""A question containing it has its effect recorded through the approval-gated tool."""
PADDING_WORDS = 30
"""Words after the echoed results: an answer long enough to be held mid-way."""
TEAM_PLAN = plan(
    ("a", "Write line a", []),
    ("b", "Write line b", []),
    ("c", "Record the effect", ["a", "b"]),
)
REACT = "other"
"""`label()` of a ReAct agent's call: neither the planner's, the analyst's nor a step's."""
TRACE_LINE = re.compile(r"^\d+\. (\w+)\(.*\) → (.*)$")


def question_of(body: dict[str, Any]) -> str:
    return next((str(m["content"]) for m in body["messages"] if m["role"] == "user"), "")


def tool_results(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "tool")


def mentions(body: dict[str, Any], tag: str) -> bool:
    return any(tag in str(m.get("content") or "") for m in body["messages"])


def react_reply(body: dict[str, Any]) -> Reply:
    question, done = question_of(body), tool_results(body)
    if done == 0:
        line = {"operation": "append", "path": EFFECTS_FILE, "content": "react\n"}
        return tool_call("file_ops", line, call_id="model_call_0")
    if done == 1:
        tool = APPROVED_TOOL if APPROVAL_WORD in question else PROVIDER_TOOL
        return tool_call(tool, {"note": question}, call_id="model_call_1")
    if done == 2:
        return tool_call("calculator", {"expression": "6*7"}, call_id="model_call_2")
    return text("Done.")


def step_reply(step: str, body: dict[str, Any]) -> Reply:
    if tool_results(body) == 0:
        if step == "c":
            return tool_call(PROVIDER_TOOL, {"note": question_of(body)}, call_id="model_c")
        line = {"operation": "append", "path": EFFECTS_FILE, "content": f"{step}\n"}
        return tool_call("file_ops", line, call_id=f"model_{step}")
    last = str(body["messages"][-1].get("content") or "")
    return text(f"{step} done: {last}")


def answer_text(body: dict[str, Any]) -> str:
    """The streamed answer: what the trace (ReAct) or the steps (a team) say, then padding."""
    prompt = str(body["messages"][-1].get("content") or "")
    found = [m.groups() for m in map(TRACE_LINE.match, prompt.splitlines()) if m]
    if found:
        echoed = "; ".join(f"{name} → {result}" for name, result in found)
    else:
        steps = prompt.split("\n\nStep ")[1:]
        echoed = " | ".join(" ".join(step.split()) for step in steps) or "nothing"
    padding = " ".join(f"w{i}" for i in range(PADDING_WORDS))
    return f"Answer: {echoed}. {padding}."


def reply(body: dict[str, Any]) -> Reply:
    kind = label(body)
    if kind == "synthesis":
        return text(answer_text(body))
    if kind == "plan":
        return structured(body, "submit_plan", TEAM_PLAN)
    if kind == "analysis":
        return structured(body, "submit_analysis", verdict(True, 0.95))
    if kind == REACT:
        return react_reply(body)
    return step_reply(kind, body)


@dataclass
class Hold:
    """Calls of one run held at one point until `gate` opens (re-issued calls too)."""

    tag: str
    """A string the held calls contain: the run's question."""
    kind: str
    """`label()` of the held calls: REACT, a step id, or "synthesis"."""
    tool_results: int = 0
    """For a non-streamed call: how many tool results it carries."""
    after_deltas: int = 0
    """For an answer: how many deltas go out before it stops."""
    gate: Gate = field(default_factory=Gate)
    arrivals: int = 0

    def matches(self, body: dict[str, Any]) -> bool:
        if label(body) != self.kind or not mentions(body, self.tag):
            return False
        return self.kind == "synthesis" or tool_results(body) == self.tool_results

    def release(self) -> None:
        self.gate.open()


class TakeoverModel(ScriptedOpenAI):
    def __init__(self, latency_seconds: float = 0.05) -> None:
        super().__init__(handler=reply)
        self.latency_seconds = latency_seconds
        self._holds: list[Hold] = []
        self._holds_lock = threading.Lock()

    def hold_call(self, tag: str, tool_results: int, kind: str = REACT) -> Hold:
        """Hold `tag`'s model call that carries `tool_results` results (its agent: `kind`)."""
        return self._add(Hold(tag, kind, tool_results=tool_results))

    def hold_answer(self, tag: str, after_deltas: int) -> Hold:
        """Hold `tag`'s streamed answer once `after_deltas` deltas are out."""
        return self._add(Hold(tag, "synthesis", after_deltas=after_deltas))

    def release_all(self) -> None:
        with self._holds_lock:
            holds, self._holds = self._holds, []
        for hold in holds:
            hold.release()

    def _add(self, hold: Hold) -> Hold:
        with self._holds_lock:
            self._holds.append(hold)
        return hold

    def _hold_for(self, body: dict[str, Any]) -> Hold | None:
        with self._holds_lock:
            return next((h for h in self._holds if not h.gate.is_open and h.matches(body)), None)

    async def _completions(self, request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        hold = self._hold_for(body)
        if hold is None:
            return await super()._completions(request)
        hold.arrivals += 1
        if not body.get("stream"):
            await hold.gate.wait()
            return await super()._completions(request)
        scripted = self._next_reply(body)
        await asyncio.sleep(self.latency_seconds)
        return StreamingResponse(self._held_stream(scripted, hold), media_type="text/event-stream")

    async def _held_stream(self, scripted: Reply, hold: Hold) -> AsyncIterator[bytes]:
        # Content frames come first: after `after_deltas` frames, that many deltas are out.
        sent = 0
        async for frame in self._stream(scripted):
            yield frame
            sent += 1
            if sent == hold.after_deltas:
                await hold.gate.wait()
