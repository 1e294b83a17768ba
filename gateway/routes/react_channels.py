"""The ReAct channel dialect: the workflow log re-told as `step`, `answer`, `compact`,
`phase`, `inject` and `done` frames, the protocol a tool-loop UI renders directly
(`GET /api/v1/tasks/{id}/stream?dialect=react`, which UIs built for it also ask for as
`dialect=fim`). `answer` goes `start`, `delta`…, `done`; `restart` in between tells the
client to drop the answer so far (the run moved to another executor, which tells it again
from a new `start`).

Pure translation from event envelopes (dicts) to (channel, payload) pairs; it keeps only
what it needs to fill in later frames (iteration start times, usage, iteration count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shuttle.envelope import ANSWER_RESTARTED

Frame = tuple[str, dict[str, Any]]


def _number(value: Any) -> float:
    """A number from a payload. Payload fields are not typed on the log, so a slip by any
    producer (a string, null, a huge integer) reads as 0 instead of ending the stream."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return 0.0
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def _int(value: Any) -> int:
    return int(_number(value))


def _seconds(timestamp: str) -> float | None:
    try:
        return datetime.fromisoformat(timestamp.removesuffix("Z")).timestamp()
    except (ValueError, AttributeError):
        return None


@dataclass
class ReactChannelTranslator:
    answer_open: bool = False
    iterations: int = 0
    _iteration_started: dict[int, float] = field(default_factory=dict)

    def translate(self, event: dict[str, Any]) -> list[Frame]:
        kind = event.get("type", "")
        payload: dict[str, Any] = event.get("payload") or {}
        handler = getattr(self, f"_on_{kind.lower()}", None)
        frames: list[Frame] = handler(event, payload) if handler else []
        return frames

    # -- tool loop --------------------------------------------------------------------------

    def _on_agent_thinking(self, event: dict[str, Any], p: dict[str, Any]) -> list[Frame]:
        iteration = _int(p.get("iteration", 0))
        self.iterations = max(self.iterations, iteration)
        if p.get("status") == "start":
            started = _seconds(event.get("timestamp", ""))
            if started is not None:
                self._iteration_started[iteration] = started
            return [("step", {"type": "thinking", "status": "start", "iteration": iteration})]
        return [
            (
                "step",
                {
                    "type": "thinking",
                    "status": "done",
                    "iteration": iteration,
                    "reasoning": p.get("reasoning", ""),
                },
            )
        ]

    def _on_tool_invoked(self, event: dict[str, Any], p: dict[str, Any]) -> list[Frame]:
        return [
            (
                "step",
                {
                    "type": "iteration",
                    "status": "start",
                    "iteration": p.get("iteration", 0),
                    "tool_name": p.get("tool_name", ""),
                    "tool_args": p.get("tool_args", {}),
                    "call_id": p.get("call_id", ""),
                },
            )
        ]

    def _on_tool_observation(self, event: dict[str, Any], p: dict[str, Any]) -> list[Frame]:
        iteration = _int(p.get("iteration", 0))
        started = self._iteration_started.get(iteration)
        now = _seconds(event.get("timestamp", ""))
        if started is not None and now is not None:
            elapsed = max(0.0, now - started)
        else:  # resumed past the iteration's start: the tool's own duration is what is known
            elapsed = _number(p.get("duration_ms", 0)) / 1000
        return [
            (
                "step",
                {
                    "type": "iteration",
                    "status": "done",
                    "iteration": iteration,
                    "tool_name": p.get("tool_name", ""),
                    "observation": p.get("result", ""),
                    "error": p.get("error") or None,
                    "iter_elapsed": round(elapsed, 3),
                    "call_id": p.get("call_id", ""),
                },
            )
        ]

    # -- answer -----------------------------------------------------------------------------

    def _open_answer(self) -> list[Frame]:
        self.answer_open = True
        return [("step", {"type": "answer", "status": "start"}), ("answer", {"status": "start"})]

    def _on_thread_message_delta(self, event: dict[str, Any], p: dict[str, Any]) -> list[Frame]:
        frames: list[Frame] = []
        # A client resuming mid-answer already had the start (its first delta had index 0).
        if not self.answer_open and _int(p.get("index", 0)) == 0:
            frames += self._open_answer()
        self.answer_open = True
        delta = str(p.get("delta", ""))
        return [*frames, ("answer", {"status": "delta", "content": delta})]

    def _restart_answer(self) -> list[Frame]:
        # Sent whether or not this connection carried any of the answer: a client that
        # resumed past the deltas it had still holds them. The next delta (index 0) opens
        # the answer again.
        self.answer_open = False
        return [("answer", {"status": "restart"})]

    def _on_thread_message_completed(self, event: dict[str, Any], p: dict[str, Any]) -> list[Frame]:
        content = str(p.get("content", ""))
        frames: list[Frame] = []
        if not self.answer_open:
            # No deltas on this connection (replayed from durable storage, or the answer was
            # never streamed): deliver it whole.
            frames += self._open_answer()
            frames.append(("answer", {"status": "delta", "content": content}))
        self.answer_open = False
        # `content` lets a client that missed deltas put the whole answer right.
        return [*frames, ("answer", {"status": "done", "content": content})]

    # -- context, phases, interrupts --------------------------------------------------------

    def _on_workspace_updated(self, event: dict[str, Any], p: dict[str, Any]) -> list[Frame]:
        if p.get("kind") != "compact":
            return []
        return [
            (
                "compact",
                {
                    "original_messages": p.get("original_messages", 0),
                    "kept_messages": p.get("kept_messages", 0),
                },
            )
        ]

    def _on_status_update(self, event: dict[str, Any], p: dict[str, Any]) -> list[Frame]:
        if p.get("kind") == ANSWER_RESTARTED:
            return self._restart_answer()
        if "phase" not in p:
            return []  # cycle warnings, reflections and checklists stay internal to the agent
        return [("phase", {k: v for k, v in p.items() if k != "kind"})]

    def _on_message_received(self, event: dict[str, Any], p: dict[str, Any]) -> list[Frame]:
        if p.get("from") != "user":
            return []
        content = p.get("content") or p.get("message") or event.get("message", "")
        return [("inject", {"type": "inject", "content": content})]

    # -- the end ----------------------------------------------------------------------------

    def _on_agent_completed(self, event: dict[str, Any], p: dict[str, Any]) -> list[Frame]:
        self.iterations = max(self.iterations, _int(p.get("iterations", 0)))
        return []

    def _on_workflow_completed(self, event: dict[str, Any], p: dict[str, Any]) -> list[Frame]:
        done = {
            "answer": p.get("result", ""),
            "iterations": self.iterations,
            "usage": {
                "input_tokens": p.get("input_tokens", 0),
                "output_tokens": p.get("output_tokens", 0),
                "total_tokens": p.get("total_tokens", 0),
                "cost_usd": p.get("total_cost_usd", 0.0),
            },
            "elapsed": round(_number(p.get("duration_ms", 0)) / 1000, 3),
        }
        return [("done", done)]

    def _on_workflow_cancelled(self, event: dict[str, Any], p: dict[str, Any]) -> list[Frame]:
        return [("done", {"answer": "", "iterations": self.iterations, "cancelled": True})]

    def _on_error_occurred(self, event: dict[str, Any], p: dict[str, Any]) -> list[Frame]:
        if not p.get("fatal"):
            return []
        message = p.get("error_message") or event.get("message", "")
        return [("done", {"answer": "", "iterations": self.iterations, "error": message})]
