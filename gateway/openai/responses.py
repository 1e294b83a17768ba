"""A run as an OpenAI Response: the object (`GET /v1/responses/{id}`) and its stream events.

A response's id is `resp_<workflow id>`, so nothing is stored beside the log. Its stream is
a function of the log alone, numbered by `sequence_number` from 0, so a stream rejoined
with `starting_after=N` regenerates it from the log and sends what comes after N.

- WORKFLOW_STARTED → `response.created`, `response.in_progress`.
- The answer (THREAD_MESSAGE_DELTA / COMPLETED) → `response.output_item.added`,
  `response.content_part.added`, `response.output_text.delta`…, `response.output_text.done`,
  `response.content_part.done`, `response.output_item.done`. A restarted answer (a
  takeover) is passed on only past what was already sent, as the chat face does.
- WORKFLOW_COMPLETED → `response.completed`; a fatal ERROR_OCCURRED → `response.failed`;
  WORKFLOW_CANCELLED → `response.incomplete` with the status `cancelled`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gateway.openai.counts import token_count
from shuttle.envelope import ANSWER_RESTARTED

ID_PREFIX = "resp_"
STATUS = {
    "pending": "queued",
    "running": "in_progress",
    "paused": "in_progress",
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}
TERMINAL = frozenset({"completed", "failed", "cancelled"})


def response_id(workflow_id: str) -> str:
    return f"{ID_PREFIX}{workflow_id}"


def workflow_of_response(response: str) -> str | None:
    """The workflow a response id names, or None for an id this face did not make."""
    if not response.startswith(ID_PREFIX) or len(response) == len(ID_PREFIX):
        return None
    return response[len(ID_PREFIX) :]


def usage_of(input_tokens: int, output_tokens: int, total_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": total_tokens,
    }


def message_item(workflow_id: str, text: str, status: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if text else []
    return {
        "id": f"msg_{workflow_id}",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


@dataclass
class ResponseShape:
    """What a Response object says besides its run's state."""

    workflow_id: str
    model: str
    created_at: int = field(default_factory=lambda: int(time.time()))
    instructions: str | None = None
    background: bool = False
    metadata: dict[str, str] = field(default_factory=dict)

    def object(
        self,
        status: str,
        answer: str = "",
        usage: dict[str, Any] | None = None,
        error: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        output = [message_item(self.workflow_id, answer, "completed")] if answer else []
        return {
            "id": response_id(self.workflow_id),
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": self.background,
            "model": self.model,
            "instructions": self.instructions,
            "metadata": self.metadata,
            "output": output,
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage,
            "error": error,
            "incomplete_details": {"reason": "cancelled"} if status == "cancelled" else None,
            "shuttle_workflow_id": self.workflow_id,
        }


@dataclass
class ResponseEvents:
    """Translates a run's log, in seq order, into its Response stream events."""

    shape: ResponseShape
    sequence: int = 0
    sent: str = ""
    opened: bool = False
    told: str = ""
    """The current telling of the answer (a takeover starts a new one)."""
    closed: bool = False

    def translate(self, kind: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        made = self._events(kind, payload)
        for event in made:
            event["sequence_number"] = self.sequence
            self.sequence += 1
        return made

    def _events(self, kind: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        if kind == "WORKFLOW_STARTED":
            running = self.shape.object("in_progress")
            return [
                {"type": "response.created", "response": {**running, "status": "queued"}},
                {"type": "response.in_progress", "response": running},
            ]
        if kind == "THREAD_MESSAGE_DELTA":
            return self._delta(str(payload.get("delta", "")))
        if kind == "STATUS_UPDATE" and payload.get("kind") == ANSWER_RESTARTED:
            self.told = ""
            return []
        if kind == "THREAD_MESSAGE_COMPLETED":
            return self._completed(str(payload.get("content", "")))
        if kind == "WORKFLOW_COMPLETED":
            answer = str(payload.get("result", self.sent))
            usage = usage_of(
                token_count(payload.get("input_tokens")),
                token_count(payload.get("output_tokens")),
                token_count(payload.get("total_tokens")),
            )
            done = self.shape.object("completed", answer, usage)
            return [*self._completed(answer), {"type": "response.completed", "response": done}]
        if kind == "ERROR_OCCURRED" and payload.get("fatal"):
            error = {
                "code": "server_error",
                "message": str(payload.get("error_message") or "the run failed"),
            }
            failed = self.shape.object("failed", error=error)
            return [{"type": "response.failed", "response": failed}]
        if kind == "WORKFLOW_CANCELLED":
            cancelled = self.shape.object("cancelled")
            return [{"type": "response.incomplete", "response": cancelled}]
        return []

    def _open(self) -> list[dict[str, Any]]:
        if self.opened:
            return []
        self.opened = True
        item = message_item(self.shape.workflow_id, "", "in_progress")
        return [
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {
                "type": "response.content_part.added",
                "item_id": item["id"],
                "output_index": 0,
                "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []},
            },
        ]

    def _text_delta(self, piece: str) -> dict[str, Any]:
        return {
            "type": "response.output_text.delta",
            "item_id": f"msg_{self.shape.workflow_id}",
            "output_index": 0,
            "content_index": 0,
            "delta": piece,
            "logprobs": [],
        }

    def _delta(self, delta: str) -> list[dict[str, Any]]:
        # A telling after a takeover repeats what was sent first: only what goes past it.
        self.told += delta
        if not delta or self.sent.startswith(self.told) or not self.told.startswith(self.sent):
            return []
        piece, self.sent = self.told[len(self.sent) :], self.told
        return [*self._open(), self._text_delta(piece)]

    def _completed(self, content: str) -> list[dict[str, Any]]:
        """The answer's closing events, once; the text past what deltas sent goes first.
        A told-again answer that differs from what was sent still closes with the whole
        answer as `text`: what was sent cannot be taken back."""
        if self.closed:
            return []
        self.closed = True
        events = self._open()
        if content.startswith(self.sent) and len(content) > len(self.sent):
            events.append(self._text_delta(content[len(self.sent) :]))
            self.sent = content
        item_id = f"msg_{self.shape.workflow_id}"
        located = {"item_id": item_id, "output_index": 0, "content_index": 0}
        part = {"type": "output_text", "text": content, "annotations": []}
        return [
            *events,
            {"type": "response.output_text.done", **located, "text": content, "logprobs": []},
            {"type": "response.content_part.done", **located, "part": part},
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": message_item(self.shape.workflow_id, content, "completed"),
            },
        ]
